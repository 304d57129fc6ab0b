"""Unit of work: one connection and one transaction, owned by the caller; rolls back
unless committed. Back-office use cases take the unit of work, pass its `conn` to the store
functions and never commit: the caller decides what one transaction holds (`run_in_uow`:
one use case alone)."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Concatenate, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine

P = ParamSpec("P")
T = TypeVar("T")

_SNAPSHOT = "REPEATABLE READ"


class UnitOfWork:
    """Usage::

    with UnitOfWork(engine) as uow:
        uow.conn.execute(...)
        uow.commit()
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._conn: Connection | None = None
        self._committed = False

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            raise RuntimeError("UnitOfWork used outside its `with` block")
        return self._conn

    def reads_snapshot(self) -> bool:
        """Whether this unit of work reads one snapshot: opened on `snapshot(engine)` (or
        SERIALIZABLE). No round trip."""
        return reads_snapshot(self.conn)

    def __enter__(self) -> UnitOfWork:
        self._conn = self._engine.connect()
        self._conn.begin()
        self._committed = False
        return self

    def commit(self) -> None:
        self.conn.commit()
        self._committed = True

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn, self._conn = self.conn, None
        try:
            if not self._committed:
                conn.rollback()
        finally:
            conn.close()


def run_in_uow(
    engine: Engine,
    use_case: Callable[Concatenate[UnitOfWork, P], T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run one use case alone: `use_case(uow, *args, **kwargs)` in its own unit of work,
    committed when it returns (rolled back when it raises). One transaction per call, as
    each BackofficeService RPC does. To run several use cases in one transaction, open the
    UnitOfWork yourself and pass it to each."""
    with UnitOfWork(engine) as uow:
        result = use_case(uow, *args, **kwargs)
        uow.commit()
    return result


def snapshot(engine: Engine) -> Engine:
    """`engine` for units of work that read one snapshot (REPEATABLE READ), for a use case
    whose several reads must agree while sales go on (points.get_ledger)."""
    return engine.execution_options(isolation_level=_SNAPSHOT)


def reads_snapshot(conn: Connection) -> bool:
    """Whether `conn` was opened on `snapshot(engine)` (or SERIALIZABLE); no round trip."""
    return conn.get_execution_options().get("isolation_level") in (_SNAPSHOT, "SERIALIZABLE")
