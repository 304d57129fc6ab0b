"""A load of real sales through the gateway and the `serve` processes behind it, for the
tests that change servers under load (tests/e2e/test_upgrade.py, test_upstreams.py): every
sale has its own id_externo, so the ledger can be audited afterwards (`audit`): every
sale answered 200 is recorded exactly once, and the fan's balance is exactly the points
of those sales, retries included."""

from __future__ import annotations

import itertools
import signal
import threading
import time
from pathlib import Path

import grpc
import httpx
import psutil  # type: ignore[import-untyped]
from sqlalchemy import create_engine, func, select

from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as bo
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as bo_grpc
from loyalty_grpc.store.db import sqlalchemy_url
from loyalty_grpc.store.tables import fans, ventas
from tests.e2e.processes import Running, loyalty_env, serve_args
from tests.support import Admin

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


def serve(tmp_path: Path, name: str, url: str, port: int, *extra: str, **env: str) -> Running:
    """`loyalty serve` with two workers on `port`, its own data dir `name` (and `env`),
    once both workers serve."""
    serve = Running(
        serve_args(port, 2, "--data-dir", str(tmp_path / name), *extra),
        tmp_path,
        loyalty_env(
            LOYALTY_DATABASE_URL=url,
            LOYALTY_ADMIN_TOKEN=TOKEN,
            LOYALTY_RATE_LIMIT_PER_MINUTE="0",
            LOYALTY_LOG_FORMAT="json",
            **env,
        ),
    )
    serve.wait_for_workers(2)
    return serve


def kill_whole(serve: Running) -> None:
    """SIGKILL to the `serve` process and every worker at once: nothing hands over."""
    parent = psutil.Process(serve.proc.pid)
    victims = [parent, *parent.children(recursive=True)]
    for process in victims:
        process.send_signal(signal.SIGKILL)
    psutil.wait_procs(victims, timeout=10)
    serve.stop(signal.SIGKILL)  # its output closed (psutil reaped it: no exit status left)


def sales_key(port: int, credentials: grpc.ChannelCredentials | None = None) -> str:
    """A program with the fan FAN and a key that may sell, set up through the back office
    of the server on `port` (with these credentials: mutual TLS); returns the key."""
    target = f"127.0.0.1:{port}"
    with (
        grpc.insecure_channel(target)
        if credentials is None
        else grpc.secure_channel(target, credentials)
    ) as channel:
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
    return key


def warnings(serves: list[Running]) -> list[str]:
    return [line for serve in serves for line in serve.lines if '"WARNING"' in line]


def audit(url: str, answered: list[str]) -> None:
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
