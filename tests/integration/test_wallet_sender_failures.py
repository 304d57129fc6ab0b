"""The wallet sender when its database fails it (real PostgreSQL): a table missing, the
database refusing connections, the local provider's table missing. It logs one traceback,
then one line per retry with a bounded exponential back-off, never a traceback per poll,
and delivers again by itself once the cause is gone."""

from __future__ import annotations

import itertools
import logging
import re
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from sqlalchemy import Engine, insert, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from loyalty_grpc.runtime.postgres import Database
from loyalty_grpc.runtime.wallet import SENDER_APPLICATION, sender_url
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.db_errors import one_line
from loyalty_grpc.store.ledger import Motivo, move_points
from loyalty_grpc.store.tables import programas, wallet_entregas
from loyalty_grpc.store.uow import UnitOfWork
from loyalty_grpc.wallet import LocalProvider, WalletSender, outbox
from loyalty_grpc.wallet.failures import FailureLog
from tests.support import insert_fan

_ids = itertools.count(1)
SENDER_LOG = "loyalty_grpc.wallet.sender"
OUTBOX_LOG = "loyalty_grpc.wallet.outbox"


@pytest.fixture(scope="module", autouse=True)
def programa(engine: Engine) -> str:
    with engine.begin() as conn:
        conn.execute(insert(programas).values(id="fallas", nombre="Fallas", tasa_puntos=1))
    return "fallas"


@pytest.fixture
def new_fan(engine: Engine) -> Callable[[], int]:
    def create() -> int:
        return insert_fan(engine, "fallas", "FAL", next(_ids))

    return create


@pytest.fixture
def sender_engine(db_url: str) -> Iterator[Engine]:
    """The sender's own engine, as `loyalty serve` builds it (named connections)."""
    eng = make_engine(sender_url(db_url), pool_size=2)
    yield eng
    eng.dispose()


@pytest.fixture
def admin(db_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        yield conn


@pytest.fixture
def server_admin(pg_server: Database) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """On the server's own database: a database cannot refuse the connection that says so."""
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        yield conn


def change(engine: Engine, fan_pk: int, puntos: int) -> None:
    with UnitOfWork(engine) as uow:
        move_points(uow.conn, "fallas", fan_pk, puntos, Motivo.VENTA)
        uow.commit()


def delivered(engine: Engine, fan_pk: int) -> list[int]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                select(wallet_entregas.c.saldo)
                .where(wallet_entregas.c.fan_pk == fan_pk)
                .order_by(wallet_entregas.c.id)
            ).scalars()
        )


def wait_for(condition: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def records(caplog: pytest.LogCaptureFixture, logger: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger]


def failed_runs(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in records(caplog, SENDER_LOG) if r.levelno == logging.ERROR]


def assert_quiet_streak(
    caplog: pytest.LogCaptureFixture, failures: list[logging.LogRecord]
) -> None:
    """One traceback (the first failure), then one line per failed run, each waiting twice
    as long as the one before, then one line when it works again."""
    assert failures[0].exc_info is not None
    assert all(r.exc_info is None for r in failures[1:])
    assert all("\n" not in r.getMessage() for r in failures)
    assert [r.getMessage().startswith("wallet sender run failed again (") for r in failures] == [
        False
    ] + [True] * (len(failures) - 1)
    waits = [float(re.findall(r"next try in ([\d.]+)s$", r.getMessage())[0]) for r in failures]
    assert waits == [pytest.approx(0.02 * 2**n) for n in range(len(waits))]
    recovered = [
        r.getMessage() for r in records(caplog, SENDER_LOG) if "runs again" in r.getMessage()
    ]
    assert len(recovered) == 1
    assert recovered[0].startswith(f"wallet sender runs again after {len(failures)} failures in ")


def test_a_missing_table_fails_runs_quietly_until_it_is_back(
    engine: Engine,
    sender_engine: Engine,
    new_fan: Callable[[], int],
    admin: psycopg.Connection[tuple[object, ...]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    fan = new_fan()
    change(engine, fan, 7)  # waiting in the outbox
    admin.execute("ALTER TABLE wallet_outbox RENAME TO wallet_outbox_away")
    sender = WalletSender(sender_engine, LocalProvider(sender_engine), interval=0.01)
    sender.start()
    try:
        wait_for(lambda: len(failed_runs(caplog)) >= 5)
        admin.execute("ALTER TABLE wallet_outbox_away RENAME TO wallet_outbox")
        wait_for(lambda: delivered(engine, fan) == [7])
    finally:
        sender.stop()
    failures = failed_runs(caplog)
    assert (
        failures[0]
        .getMessage()
        .startswith(
            'wallet sender run failed: UndefinedTable (42P01): relation "wallet_outbox" does not '
            "exist; next try in "
        )
    )
    assert_quiet_streak(caplog, failures)


def test_a_database_refusing_connections_fails_runs_quietly_until_it_is_back(
    engine: Engine,
    sender_engine: Engine,
    db_url: str,
    new_fan: Callable[[], int],
    server_admin: psycopg.Connection[tuple[object, ...]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    database = make_url(db_url).database
    fan = new_fan()
    sender = WalletSender(sender_engine, LocalProvider(sender_engine), interval=0.01)
    sender.start()
    try:
        change(engine, fan, 3)
        wait_for(lambda: delivered(engine, fan) == [3])  # the sender's pool is warm
        # The database goes away: the sender's open connections are cut, new ones refused.
        server_admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        server_admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND application_name = %s",
            (database, SENDER_APPLICATION),
        )
        wait_for(lambda: len(failed_runs(caplog)) >= 5)
        server_admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        change(engine, fan, 4)
        wait_for(lambda: delivered(engine, fan) == [3, 7])
    finally:
        server_admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        sender.stop()
    assert_quiet_streak(caplog, failed_runs(caplog))


def test_a_failing_batch_provider_logs_one_traceback_then_a_line_a_minute(
    engine: Engine,
    sender_engine: Engine,
    new_fan: Callable[[], int],
    admin: psycopg.Connection[tuple[object, ...]],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The local provider's own table missing: every batch fails (its fans are retried
    after their back-off), with one traceback, not one per batch."""
    monkeypatch.setattr(
        outbox,
        "BATCH_FAILURES",
        FailureLog(logging.getLogger(OUTBOX_LOG), recovered="batches work again", every=60.0),
    )
    caplog.set_level(logging.INFO)
    admin.execute("ALTER TABLE wallet_entregas RENAME TO wallet_entregas_away")
    sender = WalletSender(sender_engine, LocalProvider(sender_engine), interval=0.01)
    sender.start()
    waiting = []
    try:
        for _ in range(8):  # sales of new fans keep coming: a failed batch per run
            waiting.append(new_fan())
            change(engine, waiting[-1], 5)
            wait_for(lambda: outbox.BATCH_FAILURES.failures >= len(waiting))
        admin.execute("ALTER TABLE wallet_entregas_away RENAME TO wallet_entregas")
        wait_for(lambda: all(delivered(engine, fan) == [5] for fan in waiting))
    finally:
        sender.stop()
    batch_lines = [r for r in records(caplog, OUTBOX_LOG) if r.levelno == logging.ERROR]
    assert [(r.getMessage(), r.exc_info is not None) for r in batch_lines] == [
        (
            "wallet: a batch of 1 deliveries failed: UndefinedTable (42P01): relation "
            '"wallet_entregas" does not exist',
            True,
        )
    ]
    recovered = [r.getMessage() for r in records(caplog, OUTBOX_LOG) if "again" in r.getMessage()]
    assert len(recovered) == 1
    failures = int(
        re.findall(r"^batches work again after (\d+) failures in \d+ s$", recovered[0])[0]
    )
    assert failures >= len(waiting)  # a fan retried after its back-off may fail again
    assert not failed_runs(caplog)  # the runs themselves succeeded


def test_a_database_error_in_one_line_never_quotes_data(
    engine: Engine, new_fan: Callable[[], int]
) -> None:
    """What the sender's lines say of a database error (store/db_errors.py): the class,
    SQLSTATE, and the text only where it names infrastructure."""
    fan = new_fan()

    def error_of(sql: str) -> str:
        with engine.connect() as conn, pytest.raises(DBAPIError) as caught:
            conn.execute(text(sql))
        return one_line(caught.value)

    assert error_of("SELECT * FROM no_such_table") == (
        'UndefinedTable (42P01): relation "no_such_table" does not exist'
    )
    assert error_of("SELECT 'secreto@example.com'::int") == "InvalidTextRepresentation (22P02)"
    assert error_of(
        f"INSERT INTO fans (pk, programa_id, fan_id, nombre, correo, socio_desde, qr_token) "
        f"SELECT pk, programa_id, fan_id, nombre, correo, socio_desde, qr_token FROM fans "
        f"WHERE pk = {fan}"
    ) == ("UniqueViolation (23505)")
