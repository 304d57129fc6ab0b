"""The per-key call limit's counters in PostgreSQL: one function call, one round trip.

The key's single row of the UNLOGGED table `limite_llamadas` (store/tables.py), one of its
program's rows (`LimitKey`: the key's program and id; every statement finds a row by
both), is updated by `loyalty_limit_reserve` (migration 0015, where its body is): it locks
the row (inserting it on the key's first request), so the requests of one key are
serialised across every thread, process and host that shares the database; the time is
the database's clock read under that lock (`clock_timestamp()`), so hosts with skewed
clocks agree. The update is domain/rate_limit.py's `take`: shift the 61 per-second
counters and the 5 counters of outstanding spare calls to the current second, settle an
earlier batch (subtract its unused calls and its spare calls), sum, and grant up to what is
left and what the slack (`slack_calls`) allows. `settle` is `domain/rate_limit.settle` for
many keys at once: one `loyalty_limit_settle` call per program (in program order), which
locks its keys' rows in key order (so two processes settling the same keys never
deadlock; a request locks one row only). tests/integration/test_rate_limit.py runs both
and the pure model on the same sequences and compares.

On Citus both functions run on the node of the key's shard (store/distribution.py: the
table's own colocation group), so the clock is that node's, one per key; the purge's
cut-off is read first and sent as a constant (docs/rate-limit.md, docs/citus.md).

`db_now` (column `ahora`: the database clock read again after the update, so never before
the second was chosen) lets the caller know how much of that second is left.

The table keeps its Spanish column names (a rename would be a migration for nothing), and
the calls their parameter names; Python names are English: `segundo` is
`Window.second` / `Reservation.second`, `cuentas` `counts`, `reservas` `reservations`,
`concedidas` `granted`; the parameters `pedidas`, `limite`, `holgura` and `dev*` are
`wanted`, `limit`, `slack_calls` and the `Refund`.

Run in autocommit (store/autocommit.py): each call is its own transaction (no BEGIN/COMMIT
round trips; on Citus, the form a call is delegated in), fixed text prepared by psycopg.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine

from loyalty_grpc.domain.rate_limit import RESERVATION_SLOTS, SLOTS, LimitKey, Refund
from loyalty_grpc.store.autocommit import autocommit, fetch_one

# The request and the settlement are functions of migration 0015 (their bodies are there);
# Citus delegates a call only in exactly this form: `SELECT * FROM f(constants)`, no WHERE
# around it, not in a transaction block. :segundo (`second`) is None in production (the
# clock of the node holding the key's row); tests pass a second to replay a sequence
# deterministically. :dev_segundo/:dev/:dev_reservadas: the `Refund` of an earlier batch
# (NULL/0/0: none).
_RESERVE = (
    "SELECT * FROM loyalty_limit_reserve(%(programa)s::text, %(clave_id)s::bigint, "
    "%(pedidas)s::integer, %(limite)s::integer, %(holgura)s::integer, %(segundo)s::bigint, "
    "%(dev_segundo)s::bigint, %(dev)s::integer, %(dev_reservadas)s::integer)"
)

# The settlements of one program's keys' batches (at most one per key).
_SETTLE = (
    "SELECT * FROM loyalty_limit_settle(%(programa)s::text, %(claves)s::bigint[], "
    "%(segundos)s::bigint[], %(cuantas)s::integer[], %(reservadas)s::integer[])"
)

# Every program's idle rows (a background chore, not a call's statement): the cut-off is
# read first, so that the DELETE (on Citus: one per shard) carries a constant.
_CUTOFF = f"SELECT floor(extract(epoch FROM clock_timestamp()))::bigint - {SLOTS}"  # noqa: S608
_PURGE = "DELETE FROM limite_llamadas WHERE segundo < %(antes)s"


@dataclass(frozen=True)
class Reservation:
    """What the database granted: `granted` calls counted in second `second`, the key's
    counters after it, and the database clock (epoch seconds) just after."""

    second: int
    counts: tuple[int, ...]
    granted: int
    db_now: float
    reservations: tuple[int, ...] = (0,) * RESERVATION_SLOTS


class PgCounters:
    """The counters of every key, in the database of `engine`."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def reserve(
        self,
        key: LimitKey,
        wanted: int,
        limit: int,
        refund: Refund | None = None,
        *,
        slack_calls: int,
        second: int | None = None,
    ) -> Reservation:
        """Ask for `wanted` calls of the key (settling an earlier batch); see the module
        doc."""
        row = fetch_one(
            self._engine,
            _RESERVE,
            {
                "programa": key.programa_id,
                "clave_id": key.clave_id,
                "pedidas": wanted,
                "limite": limit,
                "holgura": slack_calls,
                "segundo": second,
                "dev_segundo": refund.second if refund else None,
                "dev": refund.count if refund else 0,
                "dev_reservadas": refund.reserved if refund else 0,
            },
        )
        assert row is not None  # an upsert's RETURNING always has its row
        second_, counts, reservations, granted, db_now = row
        return Reservation(
            int(second_), tuple(counts), int(granted), float(db_now), tuple(reservations)
        )

    def settle(self, refunds: Sequence[tuple[LimitKey, Refund]]) -> None:
        """Settle batches of several keys (at most one per key): one call per program, in
        program order, each locking its keys' rows in key order."""
        if not refunds:
            return
        by_program: dict[str, list[tuple[int, Refund]]] = {}
        for key, refund in refunds:
            by_program.setdefault(key.programa_id, []).append((key.clave_id, refund))
        with autocommit(self._engine) as conn:
            for programa in sorted(by_program):
                batches = by_program[programa]
                conn.execute(
                    _SETTLE,
                    {
                        "programa": programa,
                        "claves": [clave_id for clave_id, _ in batches],
                        "segundos": [r.second for _, r in batches],
                        "cuantas": [r.count for _, r in batches],
                        "reservadas": [r.reserved for _, r in batches],
                    },
                )

    def purge(self) -> None:
        """Delete the rows of keys idle for more than a window (they hold only zeros)."""
        with autocommit(self._engine) as conn:
            row = conn.execute(_CUTOFF).fetchone()
            assert row is not None
            conn.execute(_PURGE, {"antes": row[0]})
