"""The per-key call limit on a real PostgreSQL: the SQL statements equal the pure model
(domain/rate_limit.take and settle), settlements of many keys never deadlock, two limiters
reserving batches from threads never pass the limit nor refuse before the slack, and two
`loyalty serve` processes sharing the database enforce one limit together (sequential and
concurrent calls)."""

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

from loyalty_grpc.api.gateway_protocol import GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE
from loyalty_grpc.domain import rate_limit as model
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as bo_grpc
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pos
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pos_grpc
from loyalty_grpc.services.rate_limit import RateLimiter
from loyalty_grpc.store.rate_limit import _RESERVE, _SETTLE, PgCounters, Reservation
from loyalty_grpc.store.tables import claves, limite_llamadas, programas
from tests.support import Admin, error_info, free_port

LIMIT = 12
START_TIMEOUT = 60.0
# Keys of the program `rl` as the limit counts them (fixture `key_ids`).
Keys = list[model.LimitKey]


# ---------------------------------------------------------------- the statement itself


@pytest.fixture(scope="module")
def key_ids(engine: Engine) -> Keys:
    """Four keys of the program `rl`, as the limit counts them (program, id)."""
    with engine.begin() as conn:
        conn.execute(insert(programas).values(id="rl", nombre="RL", tasa_puntos="0.1"))
        return [
            model.LimitKey(
                "rl",
                conn.execute(
                    insert(claves)
                    .values(
                        programa_id="rl",
                        hash=secrets.token_bytes(32),
                        modo="vivo",
                        integracion=f"k{i}",
                        sufijo="abcd",
                    )
                    .returning(claves.c.id)
                ).scalar_one(),
            )
            for i in range(4)
        ]


def test_the_table_is_unlogged(engine: Engine) -> None:
    with engine.connect() as conn:
        persistence = conn.execute(
            text("SELECT relpersistence FROM pg_class WHERE relname = 'limite_llamadas'")
        ).scalar()
    assert persistence == "u"


def _row(engine: Engine, clave_id: model.LimitKey) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    with engine.connect() as conn:
        row = conn.execute(
            select(
                limite_llamadas.c.segundo, limite_llamadas.c.cuentas, limite_llamadas.c.reservas
            ).where(
                limite_llamadas.c.programa_id == clave_id.programa_id,
                limite_llamadas.c.clave_id == clave_id.clave_id,
            )
        ).one()
    return row.segundo, tuple(row.cuentas), tuple(row.reservas)


@pytest.mark.parametrize("seed", range(4))
def test_the_statement_equals_the_model(engine: Engine, key_ids: Keys, seed: int) -> None:
    """Random bursts, pauses, long idle gaps, batches, settlements with a request and
    alone, slacks: grants, counters and the client's view agree request by request. From
    no row (whichever tests ran before: tests/citus imports this one too)."""
    _no_counters(engine)
    rng = random.Random(seed)
    limit = rng.choice([1, 3, 7, 40])
    counters = PgCounters(engine)
    clave_id = key_ids[seed]
    second = 1_000_000 + seed
    window: model.Window | None = None
    for _ in range(300):
        second += rng.choice([0, 0, 0, 1, 2, 3, 4, 5, 7, 30, 61, 62, 500])
        wanted = rng.choice([1, 1, 2, 5, 50])
        slack_calls = rng.choice([0, 1, 3, 100])
        refund = (
            model.Refund(
                second - rng.choice([0, 1, 3, 4, 5, 60, 61]),
                rng.choice([0, 1, 3, 100]),
                rng.choice([0, 1, 2, 100]),
            )
            if rng.random() < 0.4
            else None
        )
        if window is not None and refund is not None and rng.random() < 0.3:
            window = model.settle(window, refund)
            counters.settle([(clave_id, refund)])
            assert _row(engine, clave_id) == (window.second, window.counts, window.reservations)
            continue
        window, granted = model.take(
            window, second, limit, wanted=wanted, refund=refund, slack_calls=slack_calls
        )
        got = counters.reserve(
            clave_id, wanted, limit, refund, slack_calls=slack_calls, second=second
        )
        assert (got.second, got.counts, got.reservations, got.granted) == (
            window.second,
            window.counts,
            window.reservations,
            granted,
        )
        assert got.db_now == second
        assert _row(engine, clave_id) == (window.second, window.counts, window.reservations)


def test_one_statement_settles_many_keys(engine: Engine, key_ids: Keys) -> None:
    """Each key's settlement applies to its own row only; keys without a row are skipped."""
    _no_counters(engine)
    counters = PgCounters(engine)
    windows = {}
    for i, clave_id in enumerate(key_ids[:3]):
        window, granted = model.take(None, 5000 + i, 100, wanted=10, slack_calls=8)
        got = counters.reserve(clave_id, 10, 100, slack_calls=8, second=5000 + i)
        assert granted == got.granted == 9
        windows[clave_id] = window
    settled = [
        (key_ids[2], model.Refund(5002, 4, 8)),
        (key_ids[0], model.Refund(5000, 2, 8)),
        (key_ids[3], model.Refund(5000, 2, 8)),
    ]  # no row: nothing happens
    counters.settle(settled)
    for clave_id, refund in settled[:2]:
        expected = model.settle(windows[clave_id], refund)
        assert _row(engine, clave_id) == (expected.second, expected.counts, expected.reservations)
    assert _row(engine, key_ids[1]) == (
        windows[key_ids[1]].second,
        windows[key_ids[1]].counts,
        windows[key_ids[1]].reservations,
    )
    assert _row(engine, key_ids[0])[1][-1] == 7
    assert _row(engine, key_ids[0])[2][-1] == 0


def test_settlements_in_opposite_key_orders_never_deadlock(engine: Engine, key_ids: Keys) -> None:
    """Two processes settling the same keys listed in opposite orders, while requests of
    those keys go on: the rows are locked in key order, so no deadlock (PostgreSQL would
    abort one statement after deadlock_timeout)."""
    _no_counters(engine)
    counters = PgCounters(engine)
    for clave_id in key_ids:
        counters.reserve(clave_id, 1, 1_000_000, slack_calls=0)
    orders = [key_ids, key_ids[::-1]]

    def settle(i: int) -> None:
        for _ in range(150):
            counters.settle([(k, model.Refund(0, 0, 0)) for k in orders[i % 2]])

    def reserve(i: int) -> None:
        for _ in range(150):
            counters.reserve(key_ids[i % len(key_ids)], 1, 1_000_000, slack_calls=0)

    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = [
            pool.submit(settle, 0),
            pool.submit(settle, 1),
            pool.submit(reserve, 0),
            pool.submit(reserve, 1),
        ]
        for future in done:
            future.result()
    assert time.monotonic() - began < 30


def test_the_request_and_the_settlement_find_the_row_by_its_index(
    engine: Engine, key_ids: Keys
) -> None:
    """Never the table read whole (migration 0017): it is small enough that the planner
    would, and its rows' old versions, kept while any snapshot is open, would be read on
    every request. The scans of one transaction, counted by PostgreSQL itself."""
    _no_counters(engine)
    PgCounters(engine).reserve(key_ids[0], 1, 100, slack_calls=0, second=7000)
    with engine.connect() as conn:
        conn.execute(text("ANALYZE limite_llamadas"))  # the statistics of a tiny table
        conn.commit()
    # This backend's scans not yet flushed to the statistics (none is within a transaction).
    scans = text(
        "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables WHERE relname = 'limite_llamadas'"
    )
    with engine.begin() as conn:
        seq0, idx0 = conn.execute(scans).one()
        for i, clave_id in enumerate(key_ids):
            conn.exec_driver_sql(
                _RESERVE,
                {
                    "programa": clave_id.programa_id,
                    "clave_id": clave_id.clave_id,
                    "pedidas": 2,
                    "limite": 100,
                    "holgura": 1,
                    "segundo": 7000 + i,
                    "dev_segundo": None,
                    "dev": 0,
                    "dev_reservadas": 0,
                },
            )
        conn.exec_driver_sql(
            _SETTLE,
            {
                "programa": key_ids[0].programa_id,
                "claves": [k.clave_id for k in key_ids],
                "segundos": [7003] * len(key_ids),
                "cuantas": [1] * len(key_ids),
                "reservadas": [1] * len(key_ids),
            },
        )
        seq, idx = conn.execute(scans).one()
    assert seq - seq0 == 0
    assert idx - idx0 >= 2 * len(key_ids)


def _no_counters(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(delete(limite_llamadas))


def test_db_now_is_the_database_clock_within_the_second(engine: Engine, key_ids: Keys) -> None:
    _no_counters(engine)
    got = PgCounters(engine).reserve(key_ids[0], 3, 10, slack_calls=2)
    assert got.granted == 3
    assert got.second <= got.db_now < got.second + 1 + 0.5  # read just after, same clock
    assert abs(got.db_now - time.time()) < 5


def test_idle_rows_are_purged(engine: Engine, key_ids: Keys) -> None:
    _no_counters(engine)
    stale, live = key_ids[0], key_ids[1]
    counters = PgCounters(engine)
    counters.reserve(stale, 1, 5, slack_calls=0, second=1000)  # long ago
    counters.reserve(live, 1, 5, slack_calls=0)  # now
    counters.purge()  # what is idle for more than a window goes
    with engine.connect() as conn:
        left = {
            model.LimitKey(*row)
            for row in conn.execute(
                select(limite_llamadas.c.programa_id, limite_llamadas.c.clave_id)
            )
        }
    assert stale not in left
    assert live in left


def test_two_limiters_in_threads_never_pass_the_limit(engine: Engine, key_ids: Keys) -> None:
    """Two processes' limiters (batches on), 8 threads each, one key, on PostgreSQL: at
    most the limit is admitted, and at least the limit less the slack."""

    class Counting(PgCounters):
        requests = 0

        def reserve(self, *args: Any, **kwargs: Any) -> Reservation:
            Counting.requests += 1
            return super().reserve(*args, **kwargs)

    limit = 400
    clave_id = key_ids[2]
    limiters = [RateLimiter(Counting(engine), limit) for _ in range(2)]

    def call(i: int) -> bool:
        return limiters[i % 2].take(clave_id).admitted

    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            admitted = sum(pool.map(call, range(3 * limit)))
    finally:
        for limiter in limiters:
            limiter.close()
    # Spare calls one limiter holds when the other is refused: at most the slack (4).
    assert limit - model.slack(limit) <= admitted <= limit
    # Fewer round trips than calls, although the slack of a limit this small caps the two
    # processes' spare calls at 4 together (a limit of a million: tests/unit, bench/).
    assert Counting.requests < limit * 3 // 4
    with engine.connect() as conn:
        reservations = conn.execute(
            select(limite_llamadas.c.reservas).where(
                limite_llamadas.c.programa_id == clave_id.programa_id,
                limite_llamadas.c.clave_id == clave_id.clave_id,
            )
        ).scalar_one()
    assert sum(reservations) == 0  # every batch settled (close settles what is left)


# ---------------------------------------------------------------- two server processes


@dataclass
class Servers:
    targets: list[str]
    stubs: list[pos_grpc.PosServiceStub]
    admin: Admin
    limit: int  # calls per minute


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
def calls_per_minute() -> int:
    """The servers' limit (a module of tests/citus runs the concurrent test at 600 too)."""
    return LIMIT


@pytest.fixture(scope="module")
def servers(
    db_url: str, tmp_path_factory: pytest.TempPathFactory, calls_per_minute: int
) -> Iterator[Servers]:
    token = secrets.token_urlsafe(24)
    env = {
        **os.environ,
        "LOYALTY_DATABASE_URL": db_url,
        "LOYALTY_ADMIN_TOKEN": token,
        "LOYALTY_RATE_LIMIT_PER_MINUTE": str(calls_per_minute),
        "LOYALTY_WORKERS": "1",
        "LOYALTY_KEY_CACHE_SECONDS": "0",
        "LOYALTY_METRICS_PORT": "0",
    }
    processes: list[subprocess.Popen[bytes]] = []
    channels: list[grpc.Channel] = []
    targets: list[str] = []
    try:
        for n in range(2):
            port = free_port()
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "loyalty_grpc.runtime.cli",
                    "serve",
                    "--grpc-host",
                    "127.0.0.1",
                    "--grpc-port",
                    str(port),
                    "--data-dir",  # each its own: two supervisors never share one
                    str(tmp_path_factory.mktemp(f"serve{n}")),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            processes.append(process)
            targets.append(f"127.0.0.1:{port}")
            channel = grpc.insecure_channel(targets[-1])
            channels.append(channel)
            _wait_serving(channel, process)
        admin = Admin(bo_grpc.BackofficeServiceStub(channels[0]), token)
        admin.program("dos", "Club Dos Procesos")
        yield Servers(
            targets, [pos_grpc.PosServiceStub(c) for c in channels], admin, calls_per_minute
        )
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
        # Every other refusal as Envoy's call (the gateway mark): the envelope metadata too.
        marked = i % 2 == 1
        mark = ((GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE),) if marked else ()
        with pytest.raises(grpc.RpcError) as caught:
            servers.stubs[i % 2].Ping(pos.PingRequest(), metadata=_md(key) + mark)
        error = caught.value
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error_info(error).reason == "demasiadas_llamadas"
        delay = _retry_info(error).retry_delay.seconds
        assert 1 <= delay <= model.SLOTS
        trailing = _as_dict(error.trailing_metadata())
        assert trailing["retry-after"] == str(delay)
        assert trailing["ratelimit"] == f'"default";r=0;t={delay}'
        assert trailing["ratelimit-policy"] == f'"default";q={LIMIT};w=60'
        assert trailing.get("x-http-status") == ("429" if marked else None)


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
            channels = [
                grpc.insecure_channel(t, options=[("grpc.use_local_subchannel_pool", 1)])
                for t in servers.targets
            ]
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
            codes = list(pool.map(call, range(4 * servers.limit)))
    finally:
        for channel in opened:
            channel.close()
    assert Counter(codes) == {
        grpc.StatusCode.OK: servers.limit,
        grpc.StatusCode.RESOURCE_EXHAUSTED: 3 * servers.limit,
    }
