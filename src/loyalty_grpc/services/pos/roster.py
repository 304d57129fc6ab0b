"""`roster`: the program's fans as a feed a CRM can mirror exactly by following cursors.

The design (DESIGN.md §2 "Roster feed": the writer's transaction id, read only below the
oldest running transaction):

- Every change of an entry field stamps the fan's row with the writer's 64-bit transaction
  id, `cambio_xid` (the trigger fans_cambio, on inserts too, where the row is written). A row's
  position in the feed is (cambio_xid, pk).
- A page is read in one snapshot (one statement: store/roster.read_page) whose horizon h is
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
  the fans are paged by pk (the primary key, (programa_id, pk)), each page showing the
  fans as they are when it is read; the last page continues with the changes from (W, 0).
  Every version of a fan newer than the one visible at the first page has a transaction id
  >= W, so it comes again in the changes: delivery is at least once, never a skip.

The price is latency, not correctness: a transaction left open anywhere in the database
cluster holds the horizon back, and changes committed after it started wait (they are
not lost) until it ends. When a page of changes is not full and there are committed
changes waiting behind such a transaction, the read waits up to `settle_seconds` for the
horizon to pass them, so that a client usually gets its own recent writes at once.

Ordering: positions follow the writers' transaction ids, and a position is served only
once every earlier id has ended; each page shows every fan once, in its current state.

Cursors (domain/roster_cursor.py) hold positions in the database's 64-bit transaction
counter, which never wraps and survives restarts, physical backups and replica promotion,
and the placement identity (`lugar`) of what counts them: the cluster's system identifier;
on Citus the node and shard placement of the program's fans (a shard move gives the
program another counter, so its cursors are refused and followers take a new snapshot).
A cursor is honoured only by that cluster (placement) and only when the database holds the
record that it issued the cursor (store/roster_cursors.py), written before the page is
answered: a database restored to a point before a cursor was issued, or any other
database, answers cursor_invalido and the follower takes a new snapshot, never skipping a
change. A logical dump restored into a new
cluster (whose counter may be behind the restored rows' positions) therefore needs no
counter surgery: old cursors are refused by identity, and the new cluster's cursors hold
positions of its own counter (rows stamped ahead of it are served, again, once it passes
them).

The statements: store/roster.py (a page, state and fans, in one call of
loyalty_roster_page, run on Citus on the program's shard's node; a page it could not read
there answers servicio_no_disponible) and store/roster_cursors.py (the record of the
cursors issued).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from loyalty_grpc.domain.roster_cursor import (
    Cursor,
    Fase,
    Posicion,
    check_issued,
    decode_cursor,
    encode_cursor,
    placement_unavailable,
    sistema_of,
)
from loyalty_grpc.store import roster as roster_store
from loyalty_grpc.store.db import Database
from loyalty_grpc.store.roster import RosterEntry
from loyalty_grpc.store.roster_cursors import record_cursor

__all__ = ["SETTLE_SECONDS", "RosterEntry", "RosterPage", "read_roster"]

# How long a page of changes may wait for older transactions to end (see above).
SETTLE_SECONDS = 0.5
_SETTLE_STEP = 0.01
_SETTLE_STEP_MAX = 0.05


@dataclass(frozen=True)
class RosterPage:
    # The cursor the call was made with ("" for a new snapshot).
    desde: str
    fans: list[RosterEntry]
    hay_mas: bool
    siguiente: str


@dataclass(frozen=True)
class _Read:
    fans: list[RosterEntry]
    hay_mas: bool
    siguiente: Posicion
    # Committed changes of the program wait behind a running transaction.
    waiting: bool
    # The placement identity the page was read under (store/roster.PageState.lugar).
    sistema: int
    # A page of the snapshot (its fans as they are now), not of changes.
    snapshot_page: bool


def _read(engine: Database, programa_id: str, desde: Cursor | None, limite: int) -> _Read:
    p = None if desde is None else desde.posicion
    state, page = roster_store.read_page(
        engine, programa_id, None if p is None else (p.fase.value, p.xid, p.pk), limite
    )
    if state.lugar is None:
        raise placement_unavailable()
    if desde is not None:
        check_issued(desde, sistema_of(state.lugar), state.emitido)
    horizon = state.horizon
    if p is None or p.fase is Fase.FOTO:
        watermark = horizon if p is None else p.xid
        if page.hay_mas and page.last is not None:
            return _Read(
                page.fans,
                True,
                Posicion(Fase.FOTO, watermark, page.last[1]),
                False,
                state.lugar,
                True,
            )
        return _Read(
            page.fans, False, Posicion(Fase.CAMBIOS, watermark, 0), False, state.lugar, True
        )
    # The last position served; the cursor itself when nothing was (a quiet poll gets
    # its cursor back: the feed hands out, and records, a cursor per page of data).
    end = p if page.last is None else Posicion(Fase.CAMBIOS, *page.last)
    waiting = not page.hay_mas and (
        state.newest_change is not None and state.newest_change >= horizon
    )
    return _Read(page.fans, page.hay_mas, end, waiting, state.lugar, False)


def read_roster(
    engine: Database,
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
        fans=read.fans,
        hay_mas=read.hay_mas,
        siguiente=encode_cursor(programa_id, Cursor(sistema_of(read.sistema), read.siguiente)),
    )
