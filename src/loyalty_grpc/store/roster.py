"""The roster page's read: one statement, `SELECT * FROM loyalty_roster_page(…)` (migration
0013), that returns where the page stands (its horizon, the program's newest change, the
placement identity `lugar`, whether the cursor it continues from was issued there) and the
page's fans, all read in the statement's one snapshot: a page of the snapshot (fans by pk)
or a page of changes (fans by position, (cambio_xid, pk), below the horizon). Why the feed
reads this way: services/pos/roster.py. The record of each cursor issued:
store/roster_cursors.py.

One call, not a transaction of several statements, so that on Citus the whole page runs
on the node of the program's `fans` shard (store/distribution.py delegates the function
there): its snapshot and horizon are that node's, in the transaction ids the `fans_cambio`
trigger stamps there. On PostgreSQL without Citus it is the same call. Citus delegates a
call only in exactly this form (no WHERE or ORDER BY around it, constant arguments, not in
a transaction block), hence autocommit on the pool's psycopg connection. The rows come in
the order the function returns them (plpgsql's RETURN QUERY keeps its ORDER BY): the state
row first, then the fans in feed order.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from loyalty_grpc.domain.promos import EstadoFan
from loyalty_grpc.store.autocommit import fetch_all
from loyalty_grpc.store.db import Database


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


class PageState(NamedTuple):
    """Where a page stands, read in the page's snapshot."""

    # pg_snapshot_xmin of the page's snapshot (on the node that read it).
    horizon: int
    # The program's newest change position below the snapshot's xmax (None: none).
    newest_change: int | None
    # The placement identity (migration 0013, loyalty_lugar): the cluster's
    # system_identifier on PostgreSQL, as PostgreSQL shows it (signed); on Citus a value
    # of the node and the program's shard placement; None when the page was not read on
    # the node holding the shard (then no fans were read).
    lugar: int | None
    # The cursor the page continues from was issued under `lugar` (its record exists).
    emitido: bool


# Fase of the cursor (domain/roster_cursor.Fase values), xid, pk; NULLs for a new snapshot.
PAGE = (
    "SELECT * FROM loyalty_roster_page(%(programa)s::text, %(fase)s::integer, "
    "%(xid)s::bigint, %(pk)s::bigint, %(limite)s::integer)"
)

_ESTADOS = {e.value: e for e in EstadoFan}


def _entry(row: tuple[Any, ...]) -> RosterEntry:
    # The state's four columns, pk, cambio_xid, then the entry's fields in order.
    return RosterEntry(
        row[6], row[7], row[8], row[9], row[10], _ESTADOS[row[11]], row[12], row[13], row[14]
    )


def read_page(
    engine: Database, programa_id: str, desde: tuple[int, int, int] | None, limite: int
) -> tuple[PageState, PageRows]:
    """One page of the program's feed, read in one snapshot: after `desde` = (fase, xid,
    pk), or from the start of a new snapshot when None. No fans when the state's `lugar`
    is None, or when `desde` was not issued under it (`emitido` false)."""
    fase, xid, pk = desde if desde is not None else (None, None, None)
    rows = fetch_all(
        engine,
        PAGE,
        {"programa": programa_id, "fase": fase, "xid": xid, "pk": pk, "limite": limite},
    )
    horizon, newest_change, lugar, emitido = rows[0][:4]
    state = PageState(horizon, newest_change, lugar, bool(emitido))
    served = rows[1 : limite + 1]
    last = (served[-1][5], served[-1][4]) if served else None
    return state, PageRows([_entry(r) for r in served], len(rows) > limite + 1, last)
