"""The roster page's reads: the REPEATABLE READ, read-only snapshot a page is read in, a
page of the snapshot (fans by pk) and a page of changes (fans by position, (cambio_xid,
pk), below the horizon). Why the feed reads this way: services/pos/roster.py. The cursor
bookkeeping (the page's horizon, the record of each cursor issued): store/roster_cursors.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, Engine, Row, Select, select, tuple_

from loyalty_grpc.domain.promos import EstadoFan
from loyalty_grpc.domain.roster_cursor import Posicion
from loyalty_grpc.store.tables import fans


class RosterEntry(NamedTuple):
    """One fan as the feed shows it. (A NamedTuple: a snapshot page makes 2,000 of them.)"""

    fan_id: str
    nombre: str
    correo: str
    socio_desde: int
    puntos: int
    estado: EstadoFan
    baja_en: datetime | None
    baja_motivo: str | None
    # The last change of an entry field.
    actualizado: datetime


class PageRows(NamedTuple):
    """What a page's query found: at most `limite` fans in feed order, whether more follow,
    and the feed position (cambio_xid, pk) of the last fan served (None when none was)."""

    fans: list[RosterEntry]
    hay_mas: bool
    last: tuple[int, int] | None


_COLUMNS = (
    fans.c.pk,
    fans.c.cambio_xid,
    fans.c.fan_id,
    fans.c.nombre,
    fans.c.correo,
    fans.c.socio_desde,
    fans.c.puntos,
    fans.c.estado,
    fans.c.baja_en,
    fans.c.baja_motivo,
    fans.c.actualizado,
)

_ESTADOS = {e.value: e for e in EstadoFan}


def _entry(row: Row[*tuple[Any, ...]]) -> RosterEntry:
    # Unpacked in _COLUMNS order (cheaper than attribute access, 2,000 times a page).
    _pk, _xid, fan_id, nombre, correo, socio_desde, puntos, estado, baja_en, motivo, actualizado = (
        row
    )
    return RosterEntry(
        fan_id, nombre, correo, socio_desde, puntos, _ESTADOS[estado], baja_en, motivo, actualizado
    )


def _page(rows: Sequence[Row[*tuple[Any, ...]]], limite: int) -> PageRows:
    served = rows[:limite]
    last = (served[-1].cambio_xid, served[-1].pk) if served else None
    return PageRows([_entry(r) for r in served], len(rows) > limite, last)


@contextmanager
def page_snapshot(engine: Engine) -> Iterator[Connection]:
    """A connection in one REPEATABLE READ, READ ONLY transaction (it never takes a
    transaction id), for the reads of one page; committed when the block ends."""
    conn = engine.connect().execution_options(
        isolation_level="REPEATABLE READ", postgresql_readonly=True
    )
    with conn, conn.begin():
        yield conn


def snapshot_query(programa_id: str, after_pk: int, limite: int) -> Select[Any]:
    """A snapshot page (and one row more, to tell whether another page follows): one
    range scan of the primary key (programa_id, pk)."""
    return (
        select(*_COLUMNS)
        .where(fans.c.programa_id == programa_id, fans.c.pk > after_pk)
        .order_by(fans.c.pk)
        .limit(limite + 1)
    )


def changes_query(programa_id: str, after: Posicion, horizon: int, limite: int) -> Select[Any]:
    """A page of changes (and one row more): one range scan of ix_fans_programa_cambio_xid,
    from just after the cursor's position up to the horizon, in position order."""
    return (
        select(*_COLUMNS)
        .where(
            fans.c.programa_id == programa_id,
            tuple_(fans.c.cambio_xid, fans.c.pk) > tuple_(after.xid, after.pk),
            fans.c.cambio_xid < horizon,
        )
        .order_by(fans.c.cambio_xid, fans.c.pk)
        .limit(limite + 1)
    )


def snapshot_page(conn: Connection, programa_id: str, after_pk: int, limite: int) -> PageRows:
    """The program's fans after `after_pk`, by pk, as they are in `conn`'s snapshot."""
    return _page(conn.execute(snapshot_query(programa_id, after_pk, limite)).all(), limite)


def changes_page(
    conn: Connection, programa_id: str, after: Posicion, horizon: int, limite: int
) -> PageRows:
    """The program's fans at positions after `after` and below `horizon`, in position
    order."""
    return _page(conn.execute(changes_query(programa_id, after, horizon, limite)).all(), limite)
