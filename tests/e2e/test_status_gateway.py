"""Issue 24 §5: `loyalty status` checks the gateway a `gateway run` with its data dir
started, wherever its work dir is (runtime/gateway/registered.py): LIVE is healthy; killed
(SIGKILL: nothing cleaned up) is UNHEALTHY with a line saying so, although the gRPC server
still answers; stopped on purpose (SIGTERM) is no longer expected."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.processes import LOYALTY, Running, loyalty_env
from tests.e2e.stack import Stack
from tests.e2e.test_gateway_reload import envoy_pids
from tests.support import free_port

# A generous bound, not a measurement.
ENVOY_GONE_WITHIN = 30.0


def _lines(output: str) -> dict[str, str]:
    return {
        name.strip(): value.strip()
        for name, _, value in (line.partition(":") for line in output.splitlines())
    }


@pytest.fixture
def database_url(stack: Stack) -> str:
    return stack.engine.url.render_as_string(hide_password=False)


def _status(data_dir: Path, stack: Stack, url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`status` as an operator with the service's settings runs it: no --work-dir."""
    return subprocess.run(
        [*LOYALTY, "status", "--data-dir", str(data_dir), "--target", stack.grpc_target],
        env=loyalty_env(LOYALTY_DATABASE_URL=url),
        cwd=cwd,
        text=True,
        capture_output=True,
        timeout=90,
        check=False,
    )


def _gateway_run(stack: Stack, data_dir: Path, work_dir: Path, cwd: Path) -> Running:
    running = Running(
        [
            "--log-format",
            "text",
            "gateway",
            "run",
            "--data-dir",
            str(data_dir),
            "--work-dir",
            str(work_dir),
            "--upstream",
            stack.grpc_target,
            "--http-port",
            str(free_port()),
        ],
        cwd=cwd,
        env=loyalty_env(),
    )
    running.wait_for("Envoy (pid ")
    return running


def test_status_checks_the_gateway_started_with_its_data_dir(
    stack: Stack, database_url: str, tmp_path: Path
):
    data_dir, work_dir = tmp_path / "data", tmp_path / "elsewhere" / "envoy"
    gateway = _gateway_run(stack, data_dir, work_dir, tmp_path)
    try:
        live = _status(data_dir, stack, database_url, tmp_path)
        assert live.returncode == 0, live.stdout + live.stderr
        found = _lines(live.stdout)
        assert found["gateway"].startswith("Envoy LIVE, up "), live.stdout
        assert found["upstreams"] == f"{stack.grpc_target} healthy", live.stdout
        assert "loyalty gateway run (pid" in found["processes"], live.stdout
    finally:
        gateway.stop(signal.SIGKILL)  # a crash: nothing cleans up
    deadline = time.monotonic() + ENVOY_GONE_WITHIN
    while envoy_pids(work_dir.resolve() / "bootstrap.yaml"):
        assert time.monotonic() < deadline, "Envoy outlived its killed `gateway run`"
        time.sleep(0.05)

    killed = _status(data_dir, stack, database_url, tmp_path)
    assert killed.returncode == 1, killed.stdout + killed.stderr
    found = _lines(killed.stdout)
    assert found["health"] == f"SERVING ({stack.grpc_target})"  # the server is fine
    assert found["gateway"].startswith(f"missing: a `gateway run` with data dir {data_dir} "), (
        killed.stdout
    )
    assert f"but no Envoy answers on {work_dir.resolve()}/admin/envoy.sock" in found["gateway"]
    assert found["gateway"].endswith("<< UNHEALTHY"), killed.stdout
    assert killed.stdout.rstrip().endswith("status: UNHEALTHY")

    # Started again and stopped on purpose: nothing expected any more.
    gateway = _gateway_run(stack, data_dir, work_dir, tmp_path)
    assert gateway.stop() == 0
    stopped = _status(data_dir, stack, database_url, tmp_path)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert _lines(stopped.stdout)["gateway"] == f"none running from {data_dir / 'envoy'}"
    assert "UNHEALTHY" not in stopped.stdout
