"""Unit of work: one connection and one transaction per use case; rolls back unless
committed."""

from __future__ import annotations

from types import TracebackType

from sqlalchemy import Connection, Engine


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
