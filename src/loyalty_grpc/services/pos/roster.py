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
  last position served (the same cursor when none was: every position between it and h
  is final and holds no row of the program). A change therefore can never land behind a
  cursor the feed has issued, even when writers commit out of order (a change number
  taken first and committed last is the classic way such feeds skip).
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
counter, which never wraps and survives restarts, physical backups and replica promotion,
and the system identifier of the cluster that counts them. A cursor is honoured only by
that cluster and only when the database holds the record that it issued the cursor
(store/roster_cursors.py), written before the page is answered: a database restored to a
point before a cursor was issued, or any other database, answers cursor_invalido and the
follower takes a new snapshot, never skipping a change. A logical dump restored into a new
cluster (whose counter may be behind the restored rows' positions) therefore needs no
counter surgery: old cursors are refused by identity, and the new cluster's cursors hold
positions of its own counter (rows stamped ahead of it are served, again, once it passes
them).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Engine, Row, Select, select, tuple_

from loyalty_grpc.domain.promos import EstadoFan
from loyalty_grpc.domain.roster_cursor import (
    Cursor,
    Fase,
    Posicion,
    check_issued,
    decode_cursor,
    encode_cursor,
    sistema_of,
)
from loyalty_grpc.store.roster_cursors import feed_state, record_cursor
from loyalty_grpc.store.tables import fans

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
    # The cluster's system identifier, as PostgreSQL shows it.
    sistema: int
    # A page of the snapshot (its fans as they are now), not of changes.
    snapshot_page: bool


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


def _read(engine: Engine, programa_id: str, desde: Cursor | None, limite: int) -> _Read:
    conn = engine.connect().execution_options(
        isolation_level="REPEATABLE READ", postgresql_readonly=True
    )
    with conn, conn.begin():
        p = None if desde is None else desde.posicion
        state = feed_state(conn, programa_id, None if p is None else (p.fase.value, p.xid, p.pk))
        if desde is not None:
            check_issued(desde, sistema_of(state.sistema), state.emitido)
        horizon = state.horizon
        if p is None or p.fase is Fase.FOTO:
            watermark = horizon if p is None else p.xid
            rows = conn.execute(snapshot_query(programa_id, 0 if p is None else p.pk, limite)).all()
            if len(rows) > limite:
                return _Read(
                    rows[:limite],
                    True,
                    Posicion(Fase.FOTO, watermark, rows[limite - 1].pk),
                    False,
                    state.sistema,
                    True,
                )
            return _Read(
                rows, False, Posicion(Fase.CAMBIOS, watermark, 0), False, state.sistema, True
            )
        rows = conn.execute(changes_query(programa_id, p, horizon, limite)).all()
        hay_mas = len(rows) > limite
        rows = rows[:limite]
        # The last position served; the cursor itself when nothing was (a quiet poll gets
        # its cursor back: the feed hands out, and records, a cursor per page of data).
        end = Posicion(Fase.CAMBIOS, rows[-1].cambio_xid, rows[-1].pk) if rows else p
        waiting = not hay_mas and (
            state.newest_change is not None and state.newest_change >= horizon
        )
        return _Read(rows, hay_mas, end, waiting, state.sistema, False)


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
    cursor = None if desde is None else decode_cursor(programa_id, desde)
    deadline = clock() + settle_seconds
    step = _SETTLE_STEP
    while True:
        read = _read(engine, programa_id, cursor, limite)
        if not read.waiting or clock() + step > deadline:
            break
        sleep(step)
        step = min(step * 2, _SETTLE_STEP_MAX)
    if cursor is None or read.siguiente != cursor.posicion:
        p = read.siguiente
        record_cursor(
            engine,
            programa_id,
            read.sistema,
            (p.fase.value, p.xid, p.pk),
            snapshot_page=read.snapshot_page,
        )
    return RosterPage(
        desde=desde or "",
        fans=[_entry(r) for r in read.rows],
        hay_mas=read.hay_mas,
        siguiente=encode_cursor(programa_id, Cursor(sistema_of(read.sistema), read.siguiente)),
    )
