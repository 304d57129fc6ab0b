"""Several servers behind one gateway, changed under load with zero failed calls (issue 13):
`loyalty gateway run --upstream A`, then, while sales flow without pause:

- B starts on another port and `loyalty gateway reload --upstream A,B` adds it: both
  get calls;
- A is killed whole (SIGKILL): calls cut mid-way are retried on B (Envoy's retry policy,
  another server first), the health checks and the outlier detection take A out;
- A' starts on A's port: its health check passes and it gets calls again;
- a reload to servers none of which answers is refused and changes nothing;
- `gateway reload --upstream B` takes A' out, then A' stops.

Every sale answered 200 is recorded once and the balance is exact (sales_load.audit)."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from loyalty_grpc.runtime.gateway.admin import EnvoyAdmin
from loyalty_grpc.runtime.gateway.xds import WorkDir
from tests.e2e.processes import LOYALTY, Running, loyalty_env
from tests.e2e.sales_load import Sales, audit, kill_whole, sales_key, serve, warnings
from tests.support import free_port

HOST = "127.0.0.1"


class Gateway:
    """`loyalty gateway run` in front of the given servers, and what its admin says."""

    def __init__(self, tmp_path: Path, upstreams: list[int]) -> None:
        self.work = WorkDir(tmp_path / "envoy")
        self.http_port = free_port()
        self.process = Running(
            [
                "gateway",
                "run",
                "--http-port",
                str(self.http_port),
                "--http-host",
                HOST,
                "--upstream",
                targets(upstreams),
                "--work-dir",
                str(self.work.path),
            ],
            tmp_path,
            loyalty_env(),
        )
        self.process.wait_for("serving")
        self.url = f"http://{HOST}:{self.http_port}"

    @property
    def admin(self) -> EnvoyAdmin:
        return self.work.admin()

    def health(self) -> dict[int, str]:
        """Each upstream server's port and health, as Envoy sees them."""
        return {
            int(host.address.rpartition(":")[2]): host.health
            for host in self.admin.upstream_hosts()
        }

    def successes(self) -> dict[int, int]:
        """Calls each upstream server answered, by port (Envoy's per-host counters)."""
        _, text = self.admin.get("/clusters")
        return {
            int(port): int(count)
            for port, count in re.findall(
                r"^loyalty_grpc::[^:]+:(\d+)::rq_success::(\d+)$", text, re.M
            )
        }

    def reload(self, upstreams: list[int]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                *LOYALTY,
                "gateway",
                "reload",
                "--work-dir",
                str(self.work.path),
                "--upstream",
                targets(upstreams),
            ],
            env=loyalty_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def stop(self) -> None:
        assert self.process.stop(signal.SIGTERM) == 0, "\n".join(self.process.lines)


def targets(ports: list[int]) -> str:
    return ",".join(f"{HOST}:{port}" for port in ports)


def eventually(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_servers_change_under_load_and_no_call_fails(
    tmp_path: Path, migrated_database: str
) -> None:
    a_port, b_port, dead_port = free_port(), free_port(), free_port()
    serves = [serve(tmp_path, "a", migrated_database, a_port)]
    gateway = None
    sales = None
    try:
        key = sales_key(a_port)
        gateway = Gateway(tmp_path, [a_port])
        sales = Sales(gateway.url, key)
        sales.start()

        # Add B by a reload: both serve.
        serves.append(serve(tmp_path, "b", migrated_database, b_port))
        done = gateway.reload([a_port, b_port])
        assert done.returncode == 0, done.stderr
        assert f"upstreams {HOST}:{a_port}, {HOST}:{b_port}" in done.stdout + done.stderr
        assert gateway.health() == {a_port: "healthy", b_port: "healthy"}
        before = gateway.successes().get(b_port, 0)
        sales.wait_for(150)
        assert gateway.successes()[b_port] > before

        # A dies whole: its calls go to B, Envoy takes A out.
        kill_whole(serves[0])
        sales.wait_for(150)
        eventually(
            lambda: gateway.health()[a_port] != "healthy",
            f"A is never taken out: {gateway.health()}",
        )
        assert gateway.health()[b_port] == "healthy"

        # A' on A's port: back in by its health check alone.
        serves.append(serve(tmp_path, "a2", migrated_database, a_port))
        eventually(
            lambda: gateway.health()[a_port] == "healthy",
            f"A' never passes its health check: {gateway.health()}",
        )
        before = gateway.successes().get(a_port, 0)
        eventually(lambda: gateway.successes().get(a_port, 0) > before + 20, "A' gets no calls")

        # Servers none of which answers: refused, nothing changes.
        refused = gateway.reload([dead_port])
        assert refused.returncode == 1
        assert refused.stderr == (
            "error: reload refused, Envoy keeps serving its current configuration: upstream "
            f"servers that do not pass their health check ({HOST}:{dead_port}: UNAVAILABLE, "
            "unreachable): start a server before adding it (or leave it out) and reload again\n"
        )
        assert set(gateway.health()) == {a_port, b_port}
        sales.wait_for(100)

        # Take A' out by a reload, then stop it: nothing reaches it any more.
        done = gateway.reload([b_port])
        assert done.returncode == 0, done.stderr
        assert set(gateway.health()) == {b_port}
        assert serves[2].stop(signal.SIGTERM) == 0
        sales.wait_for(150)
    finally:
        if sales is not None:
            sales.stop()
        if gateway is not None:
            gateway.stop()
        for running in serves:
            if running.proc.poll() is None:
                running.stop(signal.SIGTERM)
    assert sales.failures == [], "\n".join([*sales.failures, *warnings(serves)])
    audit(migrated_database, sales.ok)
