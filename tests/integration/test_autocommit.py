"""store/autocommit.py: the hot paths' one-statement connection leaves the pool as it found
it, and a lost connection leaves the pool (and is 503 servicio_no_disponible, safe to
retry) instead of failing the calls after it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import psycopg
import pytest
from sqlalchemy import Engine, text

from loyalty_grpc.api.gateway_protocol import GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE
from loyalty_grpc.api.server import ServerSettings, build_server
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pos
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pos_grpc
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.store.autocommit import autocommit, fetch_one
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.uow import UnitOfWork, run_in_uow

KEY = "lp_vivo_AutocommitCajaPrueba000000001"
SERVER_APP = "autocommit-test-server"


@pytest.fixture
def one_connection(db_url: str) -> Iterator[Engine]:
    """A pool of exactly one connection, so that every use is the same connection."""
    engine = make_engine(db_url, pool_size=1)
    engine.pool._max_overflow = 0  # type: ignore[attr-defined]
    yield engine
    engine.dispose()


def _backend_pid(engine: Engine) -> int:
    row = fetch_one(engine, "SELECT pg_backend_pid()", {})
    assert row is not None
    return int(row[0])


def _terminate(engine: Engine, pid: int) -> None:
    # The pid cast: Citus adds pg_terminate_backend(bigint, bigint) (its global pids).
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("SELECT pg_terminate_backend(CAST(:pid AS integer), 5000)"), {"pid": pid})


def test_the_connection_goes_back_to_the_pool_transactional(one_connection: Engine):
    with autocommit(one_connection) as conn:
        assert conn.autocommit
        conn.execute("CREATE TABLE IF NOT EXISTS probe (n int)")
    with pytest.raises(psycopg.errors.UndefinedTable), autocommit(one_connection) as conn:
        conn.execute("SELECT * FROM no_such_table")
    # The same connection, back in transactions: a unit of work that does not commit
    # leaves nothing behind.
    with UnitOfWork(one_connection) as uow:
        uow.conn.execute(text("INSERT INTO probe VALUES (1)"))
    with UnitOfWork(one_connection) as uow:
        assert uow.conn.execute(text("SELECT count(*) FROM probe")).scalar_one() == 0
        uow.conn.execute(text("DROP TABLE probe"))
        uow.commit()


def test_an_explicit_transaction_left_open_is_rolled_back(one_connection: Engine):
    with autocommit(one_connection) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS probe2 (n int)")

    def half_way() -> None:
        with autocommit(one_connection) as conn:
            conn.execute("BEGIN")
            conn.execute("INSERT INTO probe2 VALUES (1)")
            raise RuntimeError("the call failed half way")

    with pytest.raises(RuntimeError):
        half_way()
    assert fetch_one(one_connection, "SELECT count(*) FROM probe2", {}) == (0,)


def test_a_lost_connection_leaves_the_pool(one_connection: Engine, engine: Engine):
    pid = _backend_pid(one_connection)
    _terminate(engine, pid)
    with pytest.raises(psycopg.OperationalError):
        fetch_one(one_connection, "SELECT 1", {})
    # The dead connection was dropped: the next statement gets a new one.
    assert _backend_pid(one_connection) != pid


def test_a_server_that_went_away_takes_every_older_connection_with_it(db_url: str, engine: Engine):
    """After a database restart, one call fails, not one per stale pooled connection."""
    pooled = make_engine(db_url, pool_size=4)
    try:
        held = [pooled.raw_connection() for _ in range(4)]  # four backends in the pool
        pids = [int(c.driver_connection.info.backend_pid) for c in held]  # type: ignore[union-attr]
        for connection in held:
            connection.close()  # back to the pool
        for pid in pids:
            _terminate(engine, pid)
        with pytest.raises(psycopg.OperationalError):
            fetch_one(pooled, "SELECT 1", {})
        fresh = {_backend_pid(pooled) for _ in range(8)}
        assert not fresh & set(pids)
    finally:
        pooled.dispose()


def test_a_lost_connection_is_503_then_the_next_call_works(db_url: str, engine: Engine):
    run_in_uow(
        engine,
        apply_fixture,
        json.dumps(
            {
                "programas": [
                    {
                        "id": "auto",
                        "nombre": "Club Auto",
                        "tasa_puntos": "0.1",
                        "claves": [{"clave": KEY, "integracion": "Caja", "permisos": []}],
                    }
                ]
            }
        ),
    )
    server_url = f"{db_url}&application_name={SERVER_APP}"
    server = build_server(
        ServerSettings(
            database_url=server_url,
            admin_token="a" * 32,
            port=0,
            key_cache_seconds=0,
            rate_limit_per_minute=0,
        )
    )
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = pos_grpc.PosServiceStub(channel)
            # As Envoy calls (the gateway mark): the errors carry the envelope metadata.
            metadata = (
                ("authorization", f"Bearer {KEY}"),
                (GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE),
            )
            assert stub.Ping(pos.PingRequest(), metadata=metadata).ok
            with engine.connect() as conn:  # the server's pooled backends
                pids = [
                    int(r[0])
                    for r in conn.execute(
                        text("SELECT pid FROM pg_stat_activity WHERE application_name = :app"),
                        {"app": SERVER_APP},
                    )
                ]
            assert pids
            for pid in pids:
                _terminate(engine, pid)
            failures: list[Any] = []  # grpc.RpcError, also a grpc.Call
            for _ in range(len(pids) + 2):
                try:
                    assert stub.Ping(pos.PingRequest(), metadata=metadata).ok
                    break
                except grpc.RpcError as error:
                    failures.append(error)
            else:
                pytest.fail("the server did not recover from lost connections")
            assert failures  # the dead pooled connection was used once, and dropped
            for failure in failures:
                assert failure.code() == grpc.StatusCode.UNAVAILABLE
                trailing = {m.key: str(m.value) for m in failure.trailing_metadata()}
                assert '"codigo":"servicio_no_disponible"' in trailing["x-envelope"]
    finally:
        server.stop()
