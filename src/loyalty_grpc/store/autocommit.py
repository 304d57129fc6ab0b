"""One statement, one round trip, its own transaction: how the hot paths reach the database.

`tx`, `fan/resolve` and the single-code `redeem` each send ONE statement that does all of
the call's work (a data-modifying CTE is atomic: it commits whole or not at all), so they
need no BEGIN/COMMIT round trips. They run on the psycopg connection under a connection of
the engine's pool (the same pool as everything else), switched to autocommit for the call
and back when it returns to the pool. Their SQL is fixed text built once at import, with
bound parameters: no SQLAlchemy expression is built, compiled, cache-keyed or turned into
result rows per call (that cost more than the query itself: DESIGN.md §3c), and psycopg
prepares each statement on a connection from its fifth use (`prepare_threshold`), so
PostgreSQL parses and plans it once per connection.

Errors: a lost connection (psycopg OperationalError / InterfaceError) is dropped from the
pool (`invalidate`; when the server went away, every connection opened before it too) and
raised as it is; api/interceptors.py maps it to servicio_no_disponible, like SQLAlchemy's
own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy import Engine

Row = tuple[Any, ...]
Params = Mapping[str, object]

# Errors after which the connection cannot be trusted (the server went away, a protocol
# error): it leaves the pool instead of going back to it.
LOST = (psycopg.OperationalError, psycopg.InterfaceError)


@contextmanager
def autocommit(engine: Engine) -> Iterator[psycopg.Connection[Row]]:
    """A pooled connection's psycopg connection in autocommit mode, for this block."""
    pooled = engine.raw_connection()
    conn: psycopg.Connection[Row] = pooled.driver_connection  # type: ignore[assignment]
    lost = False
    try:
        conn.autocommit = True
        yield conn
    except LOST as exc:
        lost = True
        if conn.broken:
            # The server went away (a restart, a failover): every connection opened before
            # now is as dead as this one. Drop them all, as SQLAlchemy does on a disconnect
            # (connections older than this are replaced at their next checkout), rather
            # than fail one more call per stale connection.
            engine.pool._invalidate(pooled, exc)
        else:
            pooled.invalidate()
        raise
    finally:
        if not lost:
            if conn.info.transaction_status != TransactionStatus.IDLE:
                conn.rollback()  # an explicit transaction left open by an error
            conn.autocommit = False
            pooled.close()


def fetch_one(engine: Engine, sql: str, params: Params) -> Row | None:
    """The first row of one autocommit statement (None when it returns none)."""
    with autocommit(engine) as conn:
        return conn.execute(sql, params).fetchone()


def fetch_all(engine: Engine, sql: str, params: Params) -> list[Row]:
    """Every row of one autocommit statement."""
    with autocommit(engine) as conn:
        return conn.execute(sql, params).fetchall()
