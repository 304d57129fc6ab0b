"""The per-key call limit on a real PostgreSQL: the SQL statement equals the pure model
(domain/rate_limit.take), two limiters reserving batches from threads never pass the
limit, and two `loyalty serve` processes sharing the database enforce one limit together
(sequential and concurrent calls)."""

from __future__ import annotations

import os
import random
import secrets
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from sqlalchemy import Engine, delete, insert, select, text

from loyalty_grpc.domain import rate_limit as model
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as bo_grpc
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pos
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pos_grpc
from loyalty_grpc.services.rate_limit import RateLimiter
from loyalty_grpc.store.rate_limit import PgCounters, Reserva
from loyalty_grpc.store.tables import claves, limite_llamadas, programas
from tests.support import Admin, error_info, free_port

LIMIT = 12
START_TIMEOUT = 60.0


# ---------------------------------------------------------------- the statement itself


@pytest.fixture(scope="module")
def key_ids(engine: Engine) -> list[int]:
    with engine.begin() as conn:
        conn.execute(insert(programas).values(id="rl", nombre="RL", tasa_puntos="0.1"))
        return [int(conn.execute(insert(claves).values(
            programa_id="rl", hash=secrets.token_bytes(32), modo="vivo", integracion=f"k{i}",
            sufijo="abcd").returning(claves.c.id)).scalar_one()) for i in range(4)]


def test_the_table_is_unlogged(engine: Engine) -> None:
    with engine.connect() as conn:
        persistence = conn.execute(text(
            "SELECT relpersistence FROM pg_class WHERE relname = 'limite_llamadas'")).scalar()
    assert persistence == "u"


@pytest.mark.parametrize("seed", range(4))
def test_the_statement_equals_the_model(engine: Engine, key_ids: list[int], seed: int) -> None:
    """Random bursts, pauses, long idle gaps, batches and returns: grants, counters and
    the client's view agree request by request."""
    rng = random.Random(seed)
    limit = rng.choice([1, 3, 7, 40])
    counters = PgCounters(engine)
    clave_id = key_ids[seed]
    second = 1_000_000 + seed
    ventana: model.Ventana | None = None
    for _ in range(300):
        second += rng.choice([0, 0, 0, 1, 2, 7, 30, 61, 62, 500])
        pedidas = rng.choice([1, 1, 2, 5, 50])
        devolucion = (model.Devolucion(second - rng.choice([0, 1, 5, 60, 61]),
                                       rng.choice([1, 3, 100]))
                      if rng.random() < 0.3 else None)
        ventana, granted = model.take(ventana, second, limit, pedidas=pedidas,
                                      devolucion=devolucion)
        got = counters.reserve(clave_id, pedidas, limit, devolucion, segundo=second)
        assert (got.segundo, got.cuentas, got.concedidas) == (
            ventana.segundo, ventana.cuentas, granted)
        assert got.ahora == second
        with engine.connect() as conn:
            row = conn.execute(select(limite_llamadas.c.segundo, limite_llamadas.c.cuentas)
                               .where(limite_llamadas.c.clave_id == clave_id)).one()
        assert (row.segundo, tuple(row.cuentas)) == (ventana.segundo, ventana.cuentas)


def _no_counters(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(delete(limite_llamadas))


def test_ahora_is_the_database_clock_within_the_second(engine: Engine,
                                                       key_ids: list[int]) -> None:
    _no_counters(engine)
    got = PgCounters(engine).reserve(key_ids[0], 3, 10)
    assert got.concedidas == 3
    assert got.segundo <= got.ahora < got.segundo + 1 + 0.5  # read just after, same clock
    assert abs(got.ahora - time.time()) < 5


def test_idle_rows_are_purged(engine: Engine, key_ids: list[int]) -> None:
    _no_counters(engine)
    stale, live = key_ids[0], key_ids[1]
    counters = PgCounters(engine)
    counters.reserve(stale, 1, 5, segundo=1000)  # long ago
    counters.reserve(live, 1, 5)  # now
    counters.purge()  # what is idle for more than a window goes
    with engine.connect() as conn:
        left = set(conn.execute(select(limite_llamadas.c.clave_id)).scalars())
    assert stale not in left
    assert live in left


def test_two_limiters_in_threads_never_pass_the_limit(engine: Engine,
                                                      key_ids: list[int]) -> None:
    """Two processes' limiters (batches on), 8 threads each, one key, on PostgreSQL: at
    most the limit is admitted, nearly all of it, with far fewer round trips than calls."""

    class Counting(PgCounters):
        requests = 0

        def reserve(self, *args: Any, **kwargs: Any) -> Reserva:
            Counting.requests += 1
            return super().reserve(*args, **kwargs)

    limit = 400
    clave_id = key_ids[2]
    limiters = [RateLimiter(Counting(engine), limit) for _ in range(2)]

    def call(i: int) -> bool:
        return limiters[i % 2].take(clave_id).admitida

    with ThreadPoolExecutor(max_workers=16) as pool:
        admitted = sum(pool.map(call, range(3 * limit)))
    # Spare calls one limiter holds when the other is refused: a few, near the limit.
    assert limit - 2 * 4 <= admitted <= limit
    assert Counting.requests < limit // 2


# ---------------------------------------------------------------- two server processes


@dataclass
class Servers:
    targets: list[str]
    stubs: list[pos_grpc.PosServiceStub]
    admin: Admin


def _wait_serving(channel: grpc.Channel, process: subprocess.Popen[bytes]) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"`loyalty serve` exited with {process.returncode}")
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.RpcError:
            pass
        time.sleep(0.1)
    raise AssertionError("`loyalty serve` did not start in time")


@pytest.fixture(scope="module")
def servers(db_url: str) -> Iterator[Servers]:
    token = secrets.token_urlsafe(24)
    env = {**os.environ, "LOYALTY_DATABASE_URL": db_url, "LOYALTY_ADMIN_TOKEN": token,
           "LOYALTY_RATE_LIMIT_PER_MINUTE": str(LIMIT), "LOYALTY_WORKERS": "1",
           "LOYALTY_KEY_CACHE_SECONDS": "0", "LOYALTY_METRICS_PORT": "0"}
    processes: list[subprocess.Popen[bytes]] = []
    channels: list[grpc.Channel] = []
    targets: list[str] = []
    try:
        for _ in range(2):
            port = free_port()
            process = subprocess.Popen(
                [sys.executable, "-m", "loyalty_grpc.runtime.cli", "serve",
                 "--grpc-host", "127.0.0.1", "--grpc-port", str(port)],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            processes.append(process)
            targets.append(f"127.0.0.1:{port}")
            channel = grpc.insecure_channel(targets[-1])
            channels.append(channel)
            _wait_serving(channel, process)
        admin = Admin(bo_grpc.BackofficeServiceStub(channels[0]), token)
        admin.program("dos", "Club Dos Procesos")
        yield Servers(targets, [pos_grpc.PosServiceStub(c) for c in channels], admin)
    finally:
        for channel in channels:
            channel.close()
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _md(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


def _as_dict(metadata: Iterable[Any]) -> dict[str, str]:
    """Text metadata only (binary `-bin` entries such as grpc-status-details-bin are not
    text)."""
    return {k: v for k, v in metadata if isinstance(v, str)}


def _retry_info(error: grpc.RpcError) -> error_details_pb2.RetryInfo:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return info
    raise AssertionError(f"no RetryInfo in {status}")


def test_two_processes_share_one_limit(servers: Servers) -> None:
    _, key = servers.admin.key("dos", "Caja Alterna", [])
    for i in range(LIMIT):
        stub = servers.stubs[i % 2]
        response, call = stub.Ping.with_call(pos.PingRequest(), metadata=_md(key))
        assert response.ok
        initial = _as_dict(call.initial_metadata())
        assert initial["ratelimit-policy"] == f'"default";q={LIMIT};w=60'
        assert initial["ratelimit"].startswith(f'"default";r={LIMIT - i - 1};t=')
    for i in range(4):
        with pytest.raises(grpc.RpcError) as caught:
            servers.stubs[i % 2].Ping(pos.PingRequest(), metadata=_md(key))
        error = caught.value
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error_info(error).reason == "demasiadas_llamadas"
        delay = _retry_info(error).retry_delay.seconds
        assert 1 <= delay <= model.SLOTS
        trailing = _as_dict(error.trailing_metadata())
        assert trailing["retry-after"] == str(delay)
        assert trailing["ratelimit"] == f'"default";r=0;t={delay}'
        assert trailing["ratelimit-policy"] == f'"default";q={LIMIT};w=60'
        assert trailing["x-http-status"] == "429"


def test_every_authenticated_call_counts(servers: Servers) -> None:
    """A call that fails after authentication (here: a permission the key lacks) counts;
    a call with an unknown key does not reach the counter."""
    _, key = servers.admin.key("dos", "Caja Sin Permisos", [])
    with pytest.raises(grpc.RpcError) as caught:
        servers.stubs[0].ResolveFan(pos.ResolveFanRequest(fan="X"), metadata=_md(key))
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    trailing = _as_dict(caught.value.trailing_metadata())
    assert trailing["ratelimit"].startswith(f'"default";r={LIMIT - 1};')
    _, call = servers.stubs[1].Ping.with_call(pos.PingRequest(), metadata=_md(key))
    assert _as_dict(call.initial_metadata())["ratelimit"].startswith(f'"default";r={LIMIT - 2};')


def test_concurrent_calls_on_both_processes_admit_exactly_the_limit(servers: Servers) -> None:
    """16 threads, each with its own channels (one call in flight per connection: the
    workers accept few streams per connection), half the calls on each process."""
    _, key = servers.admin.key("dos", "Caja Concurrente", [])
    local = threading.local()
    opened: list[grpc.Channel] = []
    lock = threading.Lock()

    def stubs() -> list[pos_grpc.PosServiceStub]:
        if not hasattr(local, "stubs"):
            # Own subchannels: grpc shares one connection per target otherwise.
            channels = [grpc.insecure_channel(t, options=[("grpc.use_local_subchannel_pool", 1)])
                        for t in servers.targets]
            with lock:
                opened.extend(channels)
            local.stubs = [pos_grpc.PosServiceStub(c) for c in channels]
        return local.stubs  # type: ignore[no-any-return]

    def call(i: int) -> grpc.StatusCode:
        try:
            stubs()[i % 2].Ping(pos.PingRequest(), metadata=_md(key), timeout=20)
        except grpc.RpcError as error:
            return error.code()
        return grpc.StatusCode.OK

    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            codes = list(pool.map(call, range(4 * LIMIT)))
    finally:
        for channel in opened:
            channel.close()
    assert Counter(codes) == {grpc.StatusCode.OK: LIMIT,
                              grpc.StatusCode.RESOURCE_EXHAUSTED: 3 * LIMIT}
