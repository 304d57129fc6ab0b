"""An upgrade and a crash under load, through Envoy, with zero failed calls (issue 13):

- an upgrade: `serve` A serves; `serve --share-port` B starts beside it on the same port
  (its own data dir and metrics port); A gets SIGTERM (its rolling stop hands its clients
  over to B). Every call of the load succeeds;
- a crash: C starts beside B; B and its workers are killed with SIGKILL at once. Calls cut
  mid-way are retried by Envoy (the route's retry policy: every POS operation is idempotent)
  and succeed on C.

The load is real sales (`tx`), each with its own id_externo, so the ledger can be audited
afterwards: every sale that got a 200 is recorded exactly once, and the fan's balance is
exactly the points of those sales, retries included."""

from __future__ import annotations

import itertools
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import httpx
import psutil  # type: ignore[import-untyped]
import pytest
from sqlalchemy import create_engine, func, select

from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as bo
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as bo_grpc
from loyalty_grpc.runtime.envoy import EnvoyProcess
from loyalty_grpc.store import migrate
from loyalty_grpc.store.db import sqlalchemy_url
from loyalty_grpc.store.tables import fans, ventas
from tests.e2e.processes import LOYALTY, Running, loyalty_env
from tests.support import Admin, free_port

TOKEN = "upgrade-admin-token-0123456789"
FAN = "UPG0001"
THREADS = 6


class Sales:
    """Client threads posting sales without pause through Envoy, half on one kept-alive
    connection, half on a new connection per call. Anything but a 200 is a failure."""

    def __init__(self, url: str, key: str) -> None:
        self.url = url
        self.headers = {"Authorization": f"Bearer {key}"}
        self.ok: list[str] = []  # the id_externo of every sale answered 200
        self.failures: list[str] = []
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(n % 2 == 0,), daemon=True)
            for n in range(THREADS)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()
        self.wait_for(30)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def wait_for(self, calls: int, timeout: float = 60) -> None:
        target = len(self.ok) + calls
        deadline = time.monotonic() + timeout
        while len(self.ok) < target:
            assert time.monotonic() < deadline, f"{len(self.ok)} sales, {self.failures[:5]}"
            time.sleep(0.02)

    def _run(self, keep_alive: bool) -> None:
        limits = httpx.Limits(max_keepalive_connections=1 if keep_alive else 0)
        with httpx.Client(base_url=self.url, timeout=30, limits=limits) as client:
            while not self._stop.is_set():
                with self._lock:
                    id_externo = f"UPG-{next(self._ids)}"
                self._record(id_externo, self._sale(client, id_externo))

    def _sale(self, client: httpx.Client, id_externo: str) -> str | None:
        body = {"fan": FAN, "importe": 100, "id_externo": id_externo}
        try:
            response = client.post("/api/v1/tx", json=body, headers=self.headers)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        if response.status_code != 200:
            return f"{response.status_code} {response.text}"
        return None

    def _record(self, id_externo: str, failure: str | None) -> None:
        with self._lock:
            if failure is None:
                self.ok.append(id_externo)
            else:
                self.failures.append(f"{time.strftime('%H:%M:%S')} {id_externo} {failure}")


@pytest.fixture
def database(create_database: Callable[[], str]) -> str:
    url = create_database()
    migrate.upgrade(url)
    return url


def _serve(tmp_path: Path, name: str, url: str, port: int, *extra: str) -> Running:
    serve = Running(
        [
            "serve",
            "--grpc-port",
            str(port),
            "--workers",
            "2",
            "--metrics-port",
            "0",
            "--data-dir",
            str(tmp_path / name),
            *extra,
        ],
        tmp_path,
        loyalty_env(
            LOYALTY_DATABASE_URL=url,
            LOYALTY_ADMIN_TOKEN=TOKEN,
            LOYALTY_RATE_LIMIT_PER_MINUTE="0",
            LOYALTY_LOG_FORMAT="json",
        ),
    )
    serve.wait_for_workers(2)
    return serve


def _kill_whole(serve: Running) -> None:
    """SIGKILL to the `serve` process and every worker at once: nothing hands over."""
    parent = psutil.Process(serve.proc.pid)
    victims = [parent, *parent.children(recursive=True)]
    for process in victims:
        process.send_signal(signal.SIGKILL)
    psutil.wait_procs(victims, timeout=10)
    serve.stop(signal.SIGKILL)  # its output closed (psutil reaped it: no exit status left)


def test_upgrade_and_crash_fail_no_call(tmp_path: Path, database: str) -> None:
    port = free_port()
    serves = [_serve(tmp_path, "a", database, port)]
    proxy = None
    sales = None
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            admin = Admin(bo_grpc.BackofficeServiceStub(channel), TOKEN)
            admin.program("upgrade", "Club Upgrade")
            _, key = admin.key("upgrade", "Caja", ["tx:escribir"])
            admin.stub.RegisterFan(
                bo.RegisterFanRequest(
                    programa="upgrade",
                    id=FAN,
                    nombre="Ana",
                    correo="ana.upgrade@example.com",
                    socio_desde=2020,
                    qr_token="upg-q1",
                ),
                metadata=admin.md,
            )
        proxy = EnvoyProcess.start(
            http_port=free_port(),
            upstream_host="127.0.0.1",
            upstream_port=port,
            work_dir=tmp_path / "envoy",
        )
        sales = Sales(proxy.url, key)
        sales.start()

        # The upgrade: B beside A, then A's rolling stop.
        serves.append(_serve(tmp_path, "b", database, port, "--share-port"))
        sales.wait_for(100)
        assert serves[0].stop(signal.SIGTERM) == 0, "\n".join(serves[0].lines)
        sales.wait_for(200)  # on B alone

        # The crash: C beside B, then B killed whole.
        serves.append(_serve(tmp_path, "c", database, port, "--share-port"))
        sales.wait_for(100)
        _kill_whole(serves[1])
        sales.wait_for(200)  # on C alone
    finally:
        if sales is not None:
            sales.stop()
        if proxy is not None:
            proxy.stop()
        for serve in serves:
            if serve.proc.poll() is None:
                serve.stop(signal.SIGTERM)
    warnings = [line for serve in serves for line in serve.lines if '"WARNING"' in line]
    assert sales.failures == [], "\n".join([*sales.failures, *warnings])
    _audit(database, sales.ok)


def _audit(url: str, answered: list[str]) -> None:
    """Every sale answered 200 is recorded once; the balance is their points exactly."""
    engine = create_engine(sqlalchemy_url(url))
    try:
        with engine.connect() as conn:
            recorded = conn.execute(
                select(ventas.c.id_externo, func.count()).group_by(ventas.c.id_externo)
            ).all()
            balance = conn.execute(select(fans.c.puntos).where(fans.c.fan_id == FAN)).scalar_one()
    finally:
        engine.dispose()
    counts: dict[str, int] = dict(recorded)
    assert set(answered) <= set(counts)
    assert all(count == 1 for count in counts.values())
    assert balance == 10 * len(counts)  # $100 at rate 0.1 each


def test_a_second_serve_never_shares_a_data_dir(tmp_path: Path, database: str) -> None:
    port = free_port()
    first = _serve(tmp_path, "a", database, port)
    try:
        second = subprocess.run(
            [*LOYALTY, "serve", "--share-port", "--grpc-port", str(port)],
            cwd=tmp_path,
            env=loyalty_env(
                LOYALTY_DATABASE_URL=database,
                LOYALTY_ADMIN_TOKEN=TOKEN,
                LOYALTY_DATA_DIR=str(tmp_path / "a"),
            ),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        first.stop(signal.SIGTERM)
    assert second.returncode == 2
    assert second.stderr == (
        f"error: another `serve` (pid {first.proc.pid}) runs from {tmp_path / 'a'}: "
        "give this one its own --data-dir (and --metrics-port)\n"
    )
