"""How far behind the wallet sender is (`loyalty status`, `loyalty wallet send`, /metrics),
at a cost bounded by `cap` whatever the backlog.

A fan is pending when its `wallet_pases` row holds a balance waiting, or when the outbox
holds rows not folded in yet. Both are counted exactly while each part has at most `cap`
entries (bounded index range scans: the partial index of waiting balances, the outbox
primary key). Beyond that the count is an estimate: PostgreSQL's row count of that partial
index as of its last vacuum or analyze (autovacuum keeps it fresh, to within the last
10,000 changes or so), plus the outbox's id range counted as one fan per row (an upper
bound: rows of one fan are folded into one). `waiting` (leased, or in back-off) is exact
up to `cap` and reported as `cap` beyond. The oldest balance is exact (two index lookups).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from loyalty_grpc.store import wallet as wallet_store
from loyalty_grpc.store.db import Database, DatabaseConnection
from loyalty_grpc.wallet.outbox import utcnow

# Counted exactly up to this many per part.
EXACT_UP_TO = 10_000


@dataclass(frozen=True)
class Backlog:
    # Fans with a balance waiting for the sender (ingested or not).
    fans: int
    # Of them, leased or in back-off (at most the cap).
    waiting: int
    # Age of the oldest balance waiting (0 when none).
    oldest_seconds: float
    # False: `fans` is an estimate and `waiting` may be capped (see the module doc).
    exact: bool


def backlog(
    conn: DatabaseConnection, *, now: datetime | None = None, cap: int | None = EXACT_UP_TO
) -> Backlog:
    """The backlog (see the module doc); `cap=None` counts everything exactly (a scan of
    the whole backlog). `now`: the sender's clock for `waiting` (default: this host's).
    Runs in the connection's transaction, planned for its parameters (as the sender's
    statements are)."""
    limit = 2**62 if cap is None else cap + 1
    row = wallet_store.backlog_counts(conn, cap=limit, now=now or utcnow())
    exact = row.pases < limit and row.filas < limit
    fans = int(row.fans)
    if not exact:
        fans = max(int(row.pases), int(row.pases_estimadas or 0)) + max(
            int(row.filas), int(row.filas_estimadas or 0)
        )
    return Backlog(
        fans=fans,
        waiting=min(int(row.esperando), limit - 1),
        oldest_seconds=max(0.0, float(row.oldest_seconds or 0)),
        exact=exact,
    )


def pending_fans(engine: Database, *, now: datetime | None = None) -> tuple[int, int]:
    """(fans with an undelivered balance, of which waiting for a retry or leased), exact."""
    with engine.connect() as conn:
        found = backlog(conn, now=now, cap=None)
    return found.fans, found.waiting
