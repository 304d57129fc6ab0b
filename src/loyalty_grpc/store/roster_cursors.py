"""The roster feed's statements about its cursors: where a page stands (its horizon, the
cluster's identity, whether the cursor it continues from was issued here) and the record
of each cursor handed out (table `roster_cursores`).

Why a record (docs/roster.md "Cursors across a failover or a restore"): a cursor passes
every change at or before its position. It is written in its own transaction after the
page was read and committed before the page is answered, so its commit record follows in
the WAL the commit of everything the page showed. Whatever copy of the database holds the
record (a synchronous standby, a restore to a point in time) therefore holds the page's
data too, and every transaction that copy runs later gets an id above the record's own,
hence above the cursor's position. A copy without the record (restored to before the
cursor was issued) may lack changes the cursor passed, or reuse the ids it counted: the
cursor is refused there.

A polling follower that gets its cursor back adds nothing (the service records only new
cursors). Two identical reads at once: a page of changes inserts with ON CONFLICT DO
NOTHING; a snapshot page (whose fans are read as they are now, so that two reads with the
same cursor may show different data) updates the row in place instead, so that its own
commit also waits for the synchronous standby (a DO NOTHING that finds the row writes no
WAL and waits for nothing).
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import Connection, Engine, text

from loyalty_grpc.store.autocommit import autocommit

# The page's horizon (oldest running transaction); the program's newest change position
# below the newest transaction id the database has handed out (one descent of
# ix_fans_programa_cambio_xid; a position at or above it, restored from another cluster's
# counter, is served once the counter passes it); the cluster's identity; and whether the
# cursor (:fase, :xid, :pk; NULLs for a new snapshot) was issued by this cluster (one probe
# of pk_roster_cursores). The reading transaction itself never takes an id (READ ONLY).
FEED_STATE = text(
    "SELECT pg_snapshot_xmin(s)::text::bigint AS horizon, "
    "(SELECT max(f.cambio_xid) FROM fans f WHERE f.programa_id = :programa "
    " AND f.cambio_xid < pg_snapshot_xmax(s)::text::bigint) AS newest_change, "
    "c.system_identifier AS sistema, "
    "EXISTS (SELECT FROM roster_cursores r WHERE r.programa_id = :programa "
    " AND r.sistema = c.system_identifier AND r.fase = :fase AND r.xid = :xid "
    " AND r.pk = :pk) AS emitido "
    "FROM pg_current_snapshot() AS s, pg_control_system() AS c"
)

_INSERT = (
    "INSERT INTO roster_cursores (programa_id, sistema, fase, xid, pk) "
    "VALUES (%(programa)s, %(sistema)s, %(fase)s, %(xid)s, %(pk)s) "
)
_RECORD_CHANGES = _INSERT + "ON CONFLICT DO NOTHING"
_RECORD_SNAPSHOT = (
    _INSERT + "ON CONFLICT (programa_id, sistema, fase, xid, pk) DO UPDATE SET pk = excluded.pk"
)


class FeedState(NamedTuple):
    horizon: int
    # None when the program has no change below the newest transaction id.
    newest_change: int | None
    # pg_control_system().system_identifier, as PostgreSQL shows it (signed).
    sistema: int
    emitido: bool


def feed_state(conn: Connection, programa_id: str, desde: tuple[int, int, int] | None) -> FeedState:
    """Where a page read in `conn`'s snapshot stands; `desde` = (fase, xid, pk)."""
    fase, xid, pk = desde if desde is not None else (None, None, None)
    row = conn.execute(
        FEED_STATE, {"programa": programa_id, "fase": fase, "xid": xid, "pk": pk}
    ).one()
    return FeedState(*row)


def record_cursor(
    engine: Engine,
    programa_id: str,
    sistema: int,
    cursor: tuple[int, int, int],
    *,
    snapshot_page: bool,
) -> None:
    """Record that this database issued `cursor` = (fase, xid, pk), committed (and, with a
    synchronous standby, replicated) when this returns. `snapshot_page`: the cursor ends a
    page of the snapshot (see the module's docstring)."""
    fase, xid, pk = cursor
    params = {"programa": programa_id, "sistema": sistema, "fase": fase, "xid": xid, "pk": pk}
    with autocommit(engine) as conn:
        conn.execute(_RECORD_SNAPSHOT if snapshot_page else _RECORD_CHANGES, params)
