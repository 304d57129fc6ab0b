"""The `loyalty` command as an operator runs it: real processes, real signals."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil  # type: ignore[import-untyped]
import pytest

from loyalty_grpc.domain.fixture import parse_fixture
from loyalty_grpc.runtime.cli.demo import demo_document, demo_lines
from tests.e2e.processes import DEMO_KEY, LOYALTY, READY_LINE, Running, loyalty_env
from tests.support import ADMIN_TOKEN, free_port

ROOT = Path(__file__).resolve().parents[2]


def _admin(data_dir: Path, grpc_port: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *LOYALTY,
            "admin",
            "--data-dir",
            str(data_dir),
            "--target",
            f"127.0.0.1:{grpc_port}",
            *args,
        ],
        env=loyalty_env(),
        text=True,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_up_demo_serves_and_stops_cleanly(tmp_path: Path):
    data_dir = tmp_path / "data"
    http_port, grpc_port = free_port(), free_port()
    args = [
        "up",
        "--demo",
        "--http-port",
        str(http_port),
        "--grpc-port",
        str(grpc_port),
        "--data-dir",
        str(data_dir),
    ]
    for run in range(2):  # the second start reuses the data dir; the demo applies idempotently
        up = Running(args, tmp_path, loyalty_env())
        try:
            up.wait_for(READY_LINE)
            assert any(DEMO_KEY in line for line in up.lines)
            # Keys, fans and codes by state, as read from the fixture (unit-tested there).
            demo = demo_lines(parse_fixture(demo_document()))
            assert [line for line in up.lines if line.startswith("demo ")] == demo
            response = httpx.post(
                f"http://127.0.0.1:{http_port}/api/v1/ping",
                headers={"Authorization": f"Bearer {DEMO_KEY}"},
                timeout=10,
            )
            assert response.status_code == 200
            assert response.json()["data"]["programa"] == "Club Demo"
            if run == 0:
                listed = _admin(data_dir, grpc_port, "programs", "list")
                assert listed.returncode == 0, listed.stderr
                assert "demo" in listed.stdout
                bad = _admin(data_dir, grpc_port, "fans", "get", "--programa", "demo", "NOEXISTE")
                assert bad.returncode == 1
                assert bad.stderr.strip().startswith("error: fan_no_encontrado")
        finally:
            code = up.stop(signal.SIGINT if run else signal.SIGTERM)
        assert code == 0, "\n".join(up.lines)
        assert up.lines[-1] == "stopped"
        assert not (data_dir / "pgdata" / "postmaster.pid").exists()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{http_port}/api/v1/ping", timeout=2)
    assert (data_dir / "admin_token").stat().st_mode & 0o777 == 0o600


def test_migrate_then_serve_stops_gracefully_on_sigterm(
    create_database: Callable[[], str], tmp_path: Path
):
    url = create_database()
    migrated = subprocess.run(
        [*LOYALTY, "migrate"],
        env=loyalty_env(LOYALTY_DATABASE_URL=url),
        text=True,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert migrated.returncode == 0, migrated.stderr
    assert "database at revision" in migrated.stdout
    port = free_port()
    serve = Running(
        # No metrics port: 9464, the default, may be another test's on this machine.
        ["serve", "--grpc-host", "127.0.0.1", "--grpc-port", str(port), "--metrics-port", "0"],
        tmp_path,
        loyalty_env(LOYALTY_DATABASE_URL=url, LOYALTY_ADMIN_TOKEN=ADMIN_TOKEN),
    )
    try:
        serve.wait_for(f"gRPC: 127.0.0.1:{port}", timeout=30)
    finally:
        code = serve.stop(signal.SIGTERM)
    assert code == 0, "\n".join(serve.lines)


def test_serve_without_database_url_says_so(tmp_path: Path):
    result = subprocess.run(
        [*LOYALTY, "serve"],
        env=loyalty_env(),
        cwd=tmp_path,
        text=True,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0
    assert "LOYALTY_DATABASE_URL" in result.stderr


def test_gateway_check(tmp_path: Path):
    result = subprocess.run(
        [*LOYALTY, "gateway", "check"],
        cwd=tmp_path,
        env=loyalty_env(),
        text=True,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout


def test_wheel_ships_gateway_migrations_and_demo(tmp_path: Path):
    """A plain `pip install <checkout>` must work from any directory: everything the
    runtime reads is package data."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("loyalty_grpc-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in [
        "loyalty_grpc/gateway/envoy.yaml",
        "loyalty_grpc/gateway/envelope.lua",
        "loyalty_grpc/gateway/request_check.lua",
        "loyalty_grpc/gateway/loyalty_pos.pb",
        "loyalty_grpc/gateway/openapi.json",
        "loyalty_grpc/runtime/cli/demo_fixture.json",
        "loyalty_grpc/store/migrations/env.py",
        "loyalty_grpc/store/migrations/versions/0001_initial.py",
        "loyalty_grpc/gen/loyalty/v1/pos_service_pb2.py",
    ]:
        assert needed in names


def test_gateway_run_listens_only_on_the_address_given_and_logs_json(tmp_path: Path):
    """--http-host (env LOYALTY_HTTP_HOST): Envoy binds that address, not every interface
    (127.0.0.2 is loopback too on Linux, so 127.0.0.1 tells the two apart). `gateway run`
    is a production command: every line it writes is JSON, Envoy's own lines included."""
    port = free_port()
    gateway = Running(
        [
            "gateway",
            "run",
            "--http-host",
            "127.0.0.2",
            "--http-port",
            str(port),
            "--upstream",
            f"127.0.0.1:{free_port()}",
            "--work-dir",
            str(tmp_path / "envoy"),
        ],
        tmp_path,
        loyalty_env(LOYALTY_GATEWAY_THREADS="3"),
    )
    try:
        gateway.wait_for(f"serving 127.0.0.2:{port} ", timeout=60)
        # The setting reached Envoy's command line (and the first line says so).
        started = [
            found
            for line in gateway.lines
            if (found := re.search(r"Envoy \(pid (\d+), 3 worker threads\) serving ", line))
        ]
        assert started, gateway.lines
        envoy_pid = int(started[0].group(1))
        assert "--concurrency 3 " in " ".join(psutil.Process(envoy_pid).cmdline()) + " "
        with socket.create_connection(("127.0.0.2", port), timeout=5):
            pass
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        assert gateway.stop() == 0, "\n".join(gateway.lines)
    # A clean stop removes what only a running gateway uses (configuration, spec, admin
    # socket): nothing left claims a gateway runs from there.
    assert sorted(p.name for p in (tmp_path / "envoy").iterdir()) == [".lock"]
    lines = [json.loads(line) for line in gateway.lines]  # every line is JSON
    assert {"ts", "level", "logger", "msg", "pid"} <= set(lines[0])
    envoy_lines = [line for line in lines if line["logger"].startswith("envoy.")]
    assert envoy_lines, gateway.lines  # Envoy's "caught ENVOY_SIGTERM" at least
    assert all(line["ts"].endswith("Z") for line in envoy_lines)
