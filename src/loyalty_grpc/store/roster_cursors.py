"""The record of each roster cursor handed out (table `roster_cursores`), under the placement
identity the page was read under (`lugar`: the cluster's system identifier; on Citus, the
node and shard placement of the program's fans). Where a page stands (its horizon, its
`lugar`, whether the cursor it continues from was recorded under it) is read with the
page, in one statement: store/roster.py.

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

from sqlalchemy import Engine

from loyalty_grpc.store.autocommit import autocommit

_INSERT = (
    "INSERT INTO roster_cursores (programa_id, sistema, fase, xid, pk) "
    "VALUES (%(programa)s, %(sistema)s, %(fase)s, %(xid)s, %(pk)s) "
)
_RECORD_CHANGES = _INSERT + "ON CONFLICT DO NOTHING"
_RECORD_SNAPSHOT = (
    _INSERT + "ON CONFLICT (programa_id, sistema, fase, xid, pk) DO UPDATE SET pk = excluded.pk"
)


def record_cursor(
    engine: Engine,
    programa_id: str,
    sistema: int,
    cursor: tuple[int, int, int],
    *,
    snapshot_page: bool,
) -> None:
    """Record that this database issued `cursor` = (fase, xid, pk) under the placement
    identity `sistema`, committed (and, with a synchronous standby, replicated) when this
    returns. On Citus a router INSERT to the program's shard: the node the page was read
    on, unless the shard moved in between (then the record, under the old `lugar`, is
    never matched: the cursor is refused at its next use). `snapshot_page`: the cursor ends a
    page of the snapshot (see the module's docstring)."""
    fase, xid, pk = cursor
    params = {"programa": programa_id, "sistema": sistema, "fase": fase, "xid": xid, "pk": pk}
    with autocommit(engine) as conn:
        conn.execute(_RECORD_SNAPSHOT if snapshot_page else _RECORD_CHANGES, params)
