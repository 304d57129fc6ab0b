"""`roster`: the program's fans as a feed a CRM can mirror exactly by following cursors.

The design (DESIGN.md §2 "Roster feed": the writer's transaction id, read only below the
oldest running transaction):

- Every change of an entry field stamps the fan's row with the writer's 64-bit transaction
  id, `cambio_xid` (the trigger fans_cambio; an insert takes it as its default). A row's
  position in the feed is (cambio_xid, pk).
- A page is read in one REPEATABLE READ snapshot whose horizon h is
  `pg_snapshot_xmin(pg_current_snapshot())`: every transaction with an id below h had
  ended when the snapshot was taken, and every transaction that had not (running, or not
  yet started, or not yet holding an id) has, or will get, an id >= h. So every version a
  row will ever have at a position below h is already visible to the page's snapshot, and
  a later change of that row lands at a position >= h.
- A page of changes serves the rows at positions after the cursor and below h, in
  position order: one range scan of ix_fans_programa_cambio_xid. The next cursor is the
  last position served, or (h, 0) when the page was not full. A change therefore can
  never land behind a cursor the feed has issued, even when writers commit out of order
  (a change number taken first and committed last is the classic way such feeds skip).
- Without `desde`, a snapshot: the horizon W of the first page is kept in the cursor and
  the fans are paged by pk (ix_fans_programa_pk), each page showing the fans as they are
  when it is read; the last page continues with the changes from (W, 0). Every version of
  a fan newer than the one visible at the first page has a transaction id >= W, so it comes
  again in the changes: delivery is at least once, never a skip.

The price is latency, not correctness: a transaction left open anywhere in the database
cluster holds the horizon back, and changes committed after it started wait (they are
not lost) until it ends. When a page of changes is not full and there are committed
changes waiting behind such a transaction, the read waits up to `settle_seconds` for the
horizon to pass them, so that a client usually gets its own recent writes at once.

Ordering: positions follow the writers' transaction ids, and a position is served only
once every earlier id has ended; each page shows every fan once, in its current state.
Cursors (domain/roster_cursor.py) hold positions in the database's 64-bit transaction
counter, which never wraps and survives restarts, pg_upgrade, physical backups and replica
promotion: a cursor stays valid forever. A cursor from the future (a position the database
has not reached) is refused. A logical dump restored into a new cluster restarts the
counter behind the restored rows' positions: the feed detects it (a row stamped at or
beyond the newest transaction id) and answers servicio_no_disponible rather than skip,
until an operator advances the counter past the old one (`pg_resetwal --epoch`, before
the restored cluster takes writes); after that every old cursor works again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Engine, Row, Select, select, text, tuple_

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.promos import EstadoFan
from loyalty_grpc.domain.roster_cursor import Fase, Posicion, decode_cursor, encode_cursor
from loyalty_grpc.store.tables import fans

log = logging.getLogger(__name__)

# How long a page of changes may wait for older transactions to end (see above).
SETTLE_SECONDS = 0.5
_SETTLE_STEP = 0.01
_SETTLE_STEP_MAX = 0.05


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


@dataclass(frozen=True)
class RosterPage:
    # The cursor the call was made with ("" for a new snapshot).
    desde: str
    fans: list[RosterEntry]
    hay_mas: bool
    siguiente: str


@dataclass(frozen=True)
class _Read:
    rows: Sequence[Row[*tuple[Any, ...]]]
    hay_mas: bool
    siguiente: Posicion
    # Committed changes of the program wait behind a running transaction.
    waiting: bool


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

# The page's horizon (oldest running transaction), the newest transaction id the database
# has handed out, and the program's newest change position: one statement, one descent of
# ix_fans_programa_cambio_xid. The reading transaction itself never takes an id (READ ONLY).
_HORIZON = text(
    "SELECT pg_snapshot_xmin(s)::text::bigint AS horizon, "
    "pg_snapshot_xmax(s)::text::bigint AS newest, "
    "(SELECT max(cambio_xid) FROM fans WHERE programa_id = :programa) AS newest_change "
    "FROM pg_current_snapshot() AS s"
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


def snapshot_query(programa_id: str, after_pk: int, limite: int) -> Select[Any]:
    """A snapshot page (and one row more, to tell whether another page follows): one
    range scan of ix_fans_programa_pk (or of the primary key, filtered by program, when
    the planner finds the program's rows dense enough in it)."""
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


def _read(engine: Engine, programa_id: str, desde: Posicion | None, limite: int) -> _Read:
    conn = engine.connect().execution_options(
        isolation_level="REPEATABLE READ", postgresql_readonly=True
    )
    with conn, conn.begin():
        horizon, newest, newest_change = conn.execute(_HORIZON, {"programa": programa_id}).one()
        if newest_change is not None and newest_change >= newest:
            # Stamped by transactions this database never ran: restored from a logical
            # dump into a cluster whose transaction counter is behind (services/pos/roster.py
            # docstring). Serving would skip changes; refuse until an operator fixes it.
            log.error(
                "roster %s: change position %s is ahead of the transaction counter "
                "(%s); advance the counter (pg_resetwal --epoch) before serving the "
                "feed",
                programa_id,
                newest_change,
                newest,
            )
            raise LoyaltyError(
                CodigoError.SERVICIO_NO_DISPONIBLE,
                "el feed del padrón no está disponible; reintente más tarde",
            )
        if desde is not None and desde.xid > newest:
            raise LoyaltyError(
                CodigoError.CURSOR_INVALIDO,
                "desde: el cursor apunta más allá de lo que esta base de "
                "datos ha registrado (¿se restauró de otra copia?); omita "
                "`desde` para empezar con una foto completa",
            )
        if desde is None or desde.fase is Fase.FOTO:
            watermark = horizon if desde is None else desde.xid
            rows = conn.execute(
                snapshot_query(programa_id, 0 if desde is None else desde.pk, limite)
            ).all()
            if len(rows) > limite:
                return _Read(
                    rows[:limite], True, Posicion(Fase.FOTO, watermark, rows[limite - 1].pk), False
                )
            return _Read(rows, False, Posicion(Fase.CAMBIOS, watermark, 0), False)
        rows = conn.execute(changes_query(programa_id, desde, horizon, limite)).all()
        if len(rows) > limite:
            last = rows[limite - 1]
            return _Read(
                rows[:limite], True, Posicion(Fase.CAMBIOS, last.cambio_xid, last.pk), False
            )
        end = max((desde.xid, desde.pk), (horizon, 0))
        waiting = newest_change is not None and newest_change >= horizon
        return _Read(rows, False, Posicion(Fase.CAMBIOS, *end), waiting)


def read_roster(
    engine: Engine,
    programa_id: str,
    desde: str | None,
    limite: int,
    *,
    settle_seconds: float = SETTLE_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> RosterPage:
    """One page of the program's roster feed: a snapshot page when `desde` is None or a
    snapshot cursor, else the changes after the cursor. `limite` >= 1 (the edge clamps it).
    cursor_invalido when `desde` is not a cursor this program's feed issued."""
    posicion = None if desde is None else decode_cursor(programa_id, desde)
    deadline = clock() + settle_seconds
    step = _SETTLE_STEP
    while True:
        read = _read(engine, programa_id, posicion, limite)
        if not read.waiting or clock() + step > deadline:
            break
        sleep(step)
        step = min(step * 2, _SETTLE_STEP_MAX)
    return RosterPage(
        desde=desde or "",
        fans=[_entry(r) for r in read.rows],
        hay_mas=read.hay_mas,
        siguiente=encode_cursor(programa_id, read.siguiente),
    )
