"""Worker processes on one port, their rolling stop (native gRPC clients and HTTP clients
through a real Envoy), and `loyalty status`, as an operator runs them: real processes, real
signals."""

from __future__ import annotations

import functools
import json
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import grpc
import httpx
import pytest

from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pos
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pos_grpc
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.store import migrate
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.migrate import upgrade
from loyalty_grpc.store.uow import run_in_uow
from tests.e2e.processes import (
    DEMO_KEY,
    LOYALTY,
    READY_LINE,
    Running,
    loyalty_env,
    serve_args,
    worker_processes,
)
from tests.support import ADMIN_TOKEN, free_port

KEY = "lp_vivo_StatusWorkersCaja0000000001"
CHANNELS = 16


def _fixture() -> str:
    return json.dumps(
        {
            "programas": [
                {
                    "id": "wk",
                    "nombre": "Club Workers",
                    "tasa_puntos": "0.1",
                    "qr_url": "https://wk.example/fan",
                    "claves": [{"clave": KEY, "integracion": "Caja Workers", "permisos": []}],
                    "fans": [],
                }
            ]
        }
    )


class Timed(Running):
    """A `loyalty` process logging JSON lines, which say when each was logged."""

    def logged_at(self, text: str) -> float:
        """When (time.time()) the process logged the first JSON line holding `text`: not
        when our reader thread got to it, which a busy machine can delay."""
        line = next(line for line in self.lines if text in line and line.startswith("{"))
        stamp = datetime.strptime(json.loads(line)["ts"], "%Y-%m-%dT%H:%M:%S.%fZ")
        return stamp.replace(tzinfo=UTC).timestamp()


@dataclass
class Served:
    url: str
    port: int
    serve: Timed


@pytest.fixture
def served(create_database: Callable[[], str], tmp_path: Path) -> Iterator[Served]:
    """`loyalty serve --workers 2` on a migrated database with one key."""
    url = create_database()
    upgrade(url)
    engine = make_engine(url, pool_size=1)
    try:
        run_in_uow(engine, apply_fixture, _fixture())
    finally:
        engine.dispose()
    port = free_port()
    serve = Timed(
        serve_args(port, 2),
        tmp_path,
        loyalty_env(
            LOYALTY_DATABASE_URL=url,
            LOYALTY_ADMIN_TOKEN=ADMIN_TOKEN,
            LOYALTY_RATE_LIMIT_PER_MINUTE="1000000",
            LOYALTY_LOG_FORMAT="json",
        ),
    )
    try:
        serve.wait_for(f"gRPC: 127.0.0.1:{port} (2 workers)", timeout=60)
        yield Served(url, port, serve)
    finally:
        if serve.proc.poll() is None:
            serve.stop()
        else:  # a test stopped it
            serve._reader.join(5)
            if serve.proc.stdout is not None:
                serve.proc.stdout.close()


def _channels(port: int) -> list[grpc.Channel]:
    # Each channel its own connection (no shared subchannel pool): the kernel spreads them.
    return [
        grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(CHANNELS)
    ]


def _ping(channel: grpc.Channel) -> bool:
    # wait_for_ready: as a real client (and Envoy) does, a call whose connection went to a
    # worker that stopped waits for the channel to reconnect (to a worker still serving)
    # instead of failing fast through grpc's reconnect back-off.
    reply = pos_grpc.PosServiceStub(channel).Ping(
        pos.PingRequest(),
        metadata=(("authorization", f"Bearer {KEY}"),),
        timeout=5,
        wait_for_ready=True,
    )
    return bool(reply.ok)


def test_serve_runs_workers_that_share_the_port(served: Served):
    workers = worker_processes(served.serve.proc.pid)
    assert len(workers) == 2
    channels = _channels(served.port)
    try:
        with_threads: list[bool] = []
        threads = [
            threading.Thread(target=lambda c=c: with_threads.extend(_ping(c) for _ in range(20)))
            for c in channels
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert with_threads == [True] * (CHANNELS * 20)
        # Both workers hold some of the 16 connections (all on one: probability 2^-15).
        serving = [
            w.pid
            for w in workers
            if any(
                c.laddr and c.laddr.port == served.port and c.status == "ESTABLISHED"
                for c in w.net_connections("tcp")
            )
        ]
        assert len(serving) == 2
    finally:
        for channel in channels:
            channel.close()


def test_a_dead_worker_is_replaced(served: Served):
    first, _ = worker_processes(served.serve.proc.pid)
    first.kill()
    deadline = time.monotonic() + 30
    while True:
        pids = {w.pid for w in worker_processes(served.serve.proc.pid)}
        if len(pids) == 2 and first.pid not in pids:
            break
        assert time.monotonic() < deadline, "the dead worker was not replaced"
        time.sleep(0.2)
    served.serve.wait_for("killed by SIGKILL after serving")
    served.serve.wait_for("restarted (pid")
    with grpc.insecure_channel(f"127.0.0.1:{served.port}") as channel:
        assert _ping(channel)


@dataclass
class Stop:
    """Calls made again and again by several clients while `loyalty serve` stopped."""

    # (when the call ended, time.time(); None if it succeeded, else what went wrong)
    outcomes: list[tuple[float, str | None]]
    sigterm_at: float
    # When the parent logged that one worker was left: it asks that one to stop only then.
    last_worker_at: float

    def before(self) -> list[str | None]:
        return [error for at, error in self.outcomes if at < self.sigterm_at]

    def during(self) -> list[str | None]:
        """Calls that ended while another worker than the last was stopping."""
        return [error for at, error in self.outcomes if self.sigterm_at <= at < self.last_worker_at]


def _stop_under_load(served: Served, callers: list[Callable[[], str | None]]) -> Stop:
    """Each caller in a thread of its own, calling until the stop is over."""
    outcomes: list[tuple[float, str | None]] = []
    done = threading.Event()

    def loop(call: Callable[[], str | None]) -> None:
        while not done.is_set():
            error = call()
            outcomes.append((time.time(), error))

    threads = [threading.Thread(target=loop, args=(call,)) for call in callers]
    for thread in threads:
        thread.start()
    try:
        time.sleep(2)  # a few connection ages (ServerSettings.connection_age_seconds)
        _until_every_worker_has_clients(served)
        sigterm_at = time.time()
        served.serve.proc.send_signal(signal.SIGTERM)
        served.serve.wait_for("1 still serving", timeout=30)
        assert served.serve.proc.wait(30) == 0
    finally:
        done.set()
        for thread in threads:
            thread.join(20)
    return Stop(outcomes, sigterm_at, served.serve.logged_at("1 still serving"))


def _until_every_worker_has_clients(served: Served) -> None:
    """So that the first worker to stop has connections to hand over (the kernel may have
    given them all to the other one for a moment; they move about every second)."""
    deadline = time.monotonic() + 20
    while True:
        workers = worker_processes(served.serve.proc.pid)
        if len(workers) == 2 and all(
            any(
                c.laddr and c.laddr.port == served.port and c.status == "ESTABLISHED"
                for c in worker.net_connections("tcp")
            )
            for worker in workers
        ):
            return
        assert time.monotonic() < deadline, "a worker never got a client connection"
        time.sleep(0.05)


def _assert_no_call_failed(stop: Stop) -> None:
    before, during = stop.before(), stop.during()
    assert before
    assert [error for error in before if error] == []
    # Hundreds in practice (the first worker hands over for about a second, then exits).
    assert len(during) >= 20, f"only {len(during)} calls while the first worker stopped"
    failed = [error for error in during if error]
    assert failed == [], (
        f"{len(failed)} of {len(during)} calls failed during the stop: {sorted(set(failed))[:5]}"
    )


def _native_ping(channel: grpc.Channel) -> Callable[[], str | None]:
    def call() -> str | None:
        try:
            return None if _ping(channel) else "not ok"
        except grpc.RpcError as exc:
            return f"{exc.code()} {exc.details()}"

    return call


def test_rolling_stop_fails_no_native_call(served: Served):
    channels = _channels(served.port)
    try:
        stop = _stop_under_load(served, [_native_ping(c) for c in channels])
    finally:
        for channel in channels:
            channel.close()
    _assert_no_call_failed(stop)
    assert any("handed over in" in line for line in served.serve.lines)


def _http_ping(client: httpx.Client) -> str | None:
    try:
        response = client.post("/api/v1/ping", headers={"Authorization": f"Bearer {KEY}"}, json={})
    except httpx.HTTPError as exc:
        return repr(exc)
    if response.status_code == 200 and response.json()["ok"]:
        return None
    return f"{response.status_code} {response.text[:200]}"


def test_rolling_stop_fails_no_call_through_envoy(served: Served, tmp_path: Path):
    """POS clients over HTTP through a real Envoy: Envoy retries only what never reached a
    worker (connect-failure, refused-stream), so every call must succeed on its own."""
    proxy = EnvoyProcess.start_spec(
        gateway_spec(http_port=free_port(), upstreams=(f"127.0.0.1:{served.port}",)),
        work_dir=tmp_path / "envoy",
    )
    clients = [httpx.Client(base_url=proxy.url, timeout=10) for _ in range(CHANNELS)]
    try:
        stop = _stop_under_load(served, [functools.partial(_http_ping, c) for c in clients])
    finally:
        for client in clients:
            client.close()
        proxy.stop()
    _assert_no_call_failed(stop)


def _status(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOYALTY, "status", *args],
        env=loyalty_env(**env),
        text=True,
        capture_output=True,
        timeout=90,
        check=False,
    )


def test_status_of_a_healthy_server(served: Served):
    result = _status("--target", f"127.0.0.1:{served.port}", LOYALTY_DATABASE_URL=served.url)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert f"SERVING (127.0.0.1:{served.port})" in out
    assert "service:" in out
    assert "loyalty " in out
    assert "postgresql:" in out
    assert "(head)" in out
    assert "wallet outbox:" in out
    assert "0 fans pending" in out
    assert "0 fans whose balance differs" in out
    assert out.rstrip().endswith("status: healthy")


def test_status_says_unhealthy(create_database: Callable[[], str]):
    url = create_database()  # never migrated
    with socket.socket() as not_grpc:  # something listens at the target, and never answers
        not_grpc.bind(("127.0.0.1", 0))
        not_grpc.listen()
        target = f"127.0.0.1:{not_grpc.getsockname()[1]}"
        result = _status("--target", target, LOYALTY_DATABASE_URL=url)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"unreachable ({target})  << UNHEALTHY" in result.stdout
    assert "none applied, head is" in result.stdout
    assert result.stdout.rstrip().endswith("status: UNHEALTHY")


def test_status_says_not_running(tmp_path: Path):
    """Nothing listens at the target, nothing was started from the data dir or the work
    dir: not running (exit 3, as an LSB `status`), and nothing there is marked wrong."""
    target = f"127.0.0.1:{free_port()}"
    nothing = _status("--target", target, "--data-dir", str(tmp_path / "none"))
    assert nothing.returncode == 3, nothing.stdout + nothing.stderr
    assert f"({target}: nothing listens)" in nothing.stdout
    assert "no embedded database in" in nothing.stdout
    assert "UNHEALTHY" not in nothing.stdout
    assert nothing.stdout.rstrip().endswith("status: not running")
    assert not (tmp_path / "none").exists()


def test_status_of_a_killed_supervisor_says_unhealthy(tmp_path: Path):
    """A processes file whose writer is dead: it was killed (SIGKILL, a crash) and could
    not clean up; what it started may still hold ports or data. UNHEALTHY, not "not
    running"."""
    with subprocess.Popen([sys.executable, "-c", "pass"]) as gone:
        gone.wait()
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "processes.json").write_text(
        json.dumps({"command": "up", "pid": gone.pid, "started": 0, "children": []}),
        encoding="utf-8",
    )
    killed = _status("--target", f"127.0.0.1:{free_port()}", "--data-dir", str(data_dir))
    assert killed.returncode == 1, killed.stdout + killed.stderr
    assert f"(pid {gone.pid}) is not running: it was killed before it could clean up" in (
        killed.stdout
    )
    assert killed.stdout.rstrip().endswith("status: UNHEALTHY")


def test_up_with_workers_and_status_on_its_embedded_database(tmp_path: Path):
    data_dir = tmp_path / "data"
    http_port, grpc_port = free_port(), free_port()
    up = Running(
        [
            "up",
            "--demo",
            "--workers",
            "2",
            "--gateway-threads",  # not this machine's default: status reads the real count
            "2",
            "--metrics-port",
            "0",
            "--http-port",
            str(http_port),
            "--grpc-port",
            str(grpc_port),
            "--data-dir",
            str(data_dir),
        ],
        tmp_path,
        loyalty_env(),
    )
    try:
        up.wait_for(READY_LINE)
        assert len(worker_processes(up.proc.pid)) == 2
        assert any(line.startswith("Envoy: 2 worker threads, admin socket ") for line in up.lines)
        # The same settings as up's server (no --target): status finds it, and the gateway.
        status = _status("--data-dir", str(data_dir), LOYALTY_GRPC_PORT=str(grpc_port))
        assert status.returncode == 0, status.stdout + status.stderr
        assert "status: healthy" in status.stdout
        found = dict(line.split(":", 1) for line in status.stdout.splitlines() if ":" in line)
        assert found["health"].strip() == f"SERVING (127.0.0.1:{grpc_port})"
        assert found["gateway"].strip().startswith("Envoy LIVE, up ")
        assert ", 2 worker threads (admin " in found["gateway"]
        # Plain HTTP: loopback only (no --http-host, no TLS).
        assert found["listeners"].strip() == f"pos_http 127.0.0.1:{http_port}"
        assert found["upstreams"].strip() == f"127.0.0.1:{grpc_port} healthy"
        assert found["gateway config"].strip().startswith("listeners ")
        # status reused up's PostgreSQL and left it running.
        for _ in range(8):
            response = httpx.post(
                f"http://127.0.0.1:{http_port}/api/v1/ping",
                headers={"Authorization": f"Bearer {DEMO_KEY}"},
                timeout=10,
            )
            assert response.status_code == 200
    finally:
        code = up.stop(signal.SIGINT)
    assert code == 0, "\n".join(up.lines)
    assert up.lines[-1] == "stopped"
    assert not (data_dir / "pgdata" / "postmaster.pid").exists()
    # A clean stop leaves the data (the database, the generated admin token) and Envoy's
    # log, and nothing that only a running `up` uses: status says not running.
    assert sorted(p.name for p in data_dir.iterdir()) == ["admin_token", "envoy", "pgdata"]
    assert sorted(p.name for p in (data_dir / "envoy").iterdir()) == [".lock", "envoy.log"]
    after = _status("--data-dir", str(data_dir), LOYALTY_GRPC_PORT=str(grpc_port))
    assert after.returncode == 3, after.stdout + after.stderr
    assert "UNHEALTHY" not in after.stdout
    assert "(head)" in after.stdout  # the database is still checked
    assert after.stdout.rstrip().endswith("status: not running")


def test_a_port_in_use_fails_before_any_worker_starts(
    tmp_path: Path, create_database: Callable[[], str]
):
    url = create_database()
    migrate.upgrade(url)  # past the schema check: the port is what fails
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [*LOYALTY, *serve_args(port, 2)],
            cwd=tmp_path,
            env=loyalty_env(LOYALTY_DATABASE_URL=url, LOYALTY_ADMIN_TOKEN=secrets.token_hex(16)),
            text=True,
            capture_output=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}: is the port in use?" in result.stderr
    assert "worker" not in result.stderr
