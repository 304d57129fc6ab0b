"""The wallet sender's statements (wallet/outbox.py runs them, wallet/backlog.py reads the
backlog, wallet/providers.py records local deliveries): tables `wallet_outbox`,
`wallet_pases` and `wallet_entregas`.

The sender works program by program (on Citus each program's rows live on one node): its
two statements are calls of plpgsql functions (migration 0016), `SELECT * FROM f(…)` in
autocommit, each its own transaction, which store/distribution.py delegates on a Citus
coordinator to the node of the program's shard. The same calls serve PostgreSQL without
Citus.

- `turn` (`loyalty_wallet_turno`): one program's turn of a run. Ingest: delete up to
  `filas` of the program's oldest outbox rows (by id, `FOR UPDATE SKIP LOCKED`) and fold
  the latest balance per fan into the fan's `wallet_pases` row (`saldo_pendiente`,
  `saldo_version`, `saldo_id`), creating it when needed. A fold only replaces a balance
  with a newer one: a higher `version`, the fan's `saldo_version` counter that the
  balance UPDATE bumps under the fan's row lock (so versions follow the order of a fan's
  balance changes, on any node and across shard moves, where outbox ids need not), the
  outbox id breaking ties only between rows written before migration 0016 (version 0).
  So two senders folding a fan's rows in the wrong order leave the newer balance. Rows
  of different fans commit out of id order; a row committed after a run took higher ids
  is simply the lowest one left for the next run (no high-water mark, nothing skipped).
  Rows are upserted in fan order, so concurrent senders cannot deadlock; delete and fold
  commit together, so a sender that dies loses nothing. Then claim: up to `fans` of the
  program's fans whose balance waits and whose `proximo_intento` has passed (a range
  scan of ix_wallet_pases_programa_due, longest-waiting first, `FOR UPDATE SKIP LOCKED`:
  several processes never claim the same fan), setting `proximo_intento` to the lease's
  end. A program with nothing waiting costs one call of two index probes.
- `record_outcomes` (`loyalty_wallet_record`, one call per program of the batch), only
  where the lease is still ours (`proximo_intento` unchanged), locking the rows in fan
  order first (no deadlock with an ingest): a settled attempt (delivered, or dropped as a
  permanent failure) clears the balance if it is still the one attempted (its version
  and outbox id; a newer one folded in meanwhile stays, due at once); otherwise the
  balance stays with the attempts and next try given.
- `backlog_counts` (`BACKLOG_SQL`): bounded counts of the backlog over every program
  (wallet/backlog.py says what they mean; on Citus a multi-shard read, no locks).
- `record_deliveries`: the local provider's deliveries, a batch per INSERT.

A sale never waits for a sender: senders lock only `wallet_pases` rows and the outbox rows
they take. Both functions run with `plan_cache_mode = force_custom_plan` (a function
setting, migration 0016): a plan cached while the outbox was empty (a sequential scan)
must never serve a backlog of a million rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final, NamedTuple

from sqlalchemy import Connection, text

from loyalty_grpc.store.autocommit import fetch_all
from loyalty_grpc.store.db import Database

# `proximo_intento` of a fan that is due at once, whatever a sender's clock says (several
# processes' clocks differ a little; `now` is injectable).
DUE_AT_ONCE = datetime(1970, 1, 1, tzinfo=UTC)

# The programs, in a fixed order (a reference table on Citus: read on the coordinator).
PROGRAMS_SQL: Final = "SELECT id FROM programas ORDER BY id"

# Filas: outbox rows to ingest at most; fans: fans to claim at most.
TURN_SQL: Final = (
    "SELECT * FROM loyalty_wallet_turno(%(programa)s::text, %(filas)s::integer, "
    "%(fans)s::integer, %(due)s::timestamptz, %(now)s::timestamptz, "
    "%(lease_until)s::timestamptz)"
)

# Per fan: `cubierto` — the attempt settled the balance (delivered, or dropped as a
# permanent failure); `intentos`, `proximo` — the new values; `entregado` — the balance
# delivered; `error` — the new `ultimo_error`. NULL means unchanged.
RECORD_SQL: Final = (
    "SELECT * FROM loyalty_wallet_record(%(programa)s::text, %(fan_pks)s::bigint[], "
    "%(saldo_ids)s::bigint[], %(versiones)s::bigint[], %(cubiertos)s::boolean[], "
    "%(intentos)s::integer[], %(proximos)s::timestamptz[], %(entregados)s::bigint[], "
    "%(errores)s::text[], %(lease_until)s::timestamptz, %(due)s::timestamptz, "
    "%(at)s::timestamptz)"
)

BACKLOG_SQL: Final = text("""
WITH p AS (
    SELECT fan_pk FROM wallet_pases WHERE pendiente_desde IS NOT NULL
    ORDER BY pendiente_desde LIMIT :cap
), o AS (
    SELECT fan_pk FROM wallet_outbox ORDER BY id LIMIT :cap
)
SELECT (SELECT count(*) FROM p) AS pases,
       (SELECT count(*) FROM o) AS filas,
       (SELECT count(*) FROM (SELECT fan_pk FROM p UNION SELECT fan_pk FROM o) AS u) AS fans,
       (SELECT count(*) FROM (
            SELECT 1 FROM wallet_pases
            WHERE pendiente_desde IS NOT NULL AND proximo_intento > :now
            ORDER BY proximo_intento LIMIT :cap) AS w) AS esperando,
       extract(epoch FROM now() - least(
            (SELECT pendiente_desde FROM wallet_pases WHERE pendiente_desde IS NOT NULL
             ORDER BY pendiente_desde LIMIT 1),
            (SELECT creado FROM wallet_outbox ORDER BY id LIMIT 1))) AS oldest_seconds,
       (SELECT reltuples FROM pg_class
        WHERE oid = CAST('ix_wallet_pases_pendiente_desde' AS regclass)) AS pases_estimadas,
       (SELECT max(id) FROM wallet_outbox) - (SELECT min(id) FROM wallet_outbox) + 1
           AS filas_estimadas
""")

# A whole batch of local deliveries: one statement, rows in the batch's order.
RECORD_DELIVERIES_SQL: Final = text(
    "INSERT INTO wallet_entregas (programa_id, fan_pk, saldo, proveedor) "
    "SELECT d.programa_id, d.fan_pk, d.saldo, :proveedor "
    "FROM unnest(CAST(:programas AS text[]), CAST(:fan_pks AS bigint[]), "
    "CAST(:saldos AS bigint[])) AS d(programa_id, fan_pk, saldo)"
)

_CUSTOM_PLANS_HERE: Final = "SET LOCAL plan_cache_mode = force_custom_plan"


def programs(engine: Database) -> list[str]:
    """Every program, in id order."""
    return [str(r[0]) for r in fetch_all(engine, PROGRAMS_SQL, {})]


class ClaimedPass(NamedTuple):
    """A fan claimed for delivery: its balance waiting (`saldo_pendiente`, version
    `saldo_version`, from outbox row `saldo_id`), its failed attempts so far, since when a
    balance waits, and its pass."""

    fan_pk: int
    saldo_pendiente: int
    saldo_id: int
    saldo_version: int
    intentos: int
    pendiente_desde: datetime
    programa_id: str
    fan_id: str


class Turn(NamedTuple):
    """What one program's turn did: outbox rows ingested, fans whose balance changed, and
    the fans claimed (in no particular order)."""

    filas: int
    plegados: int
    claimed: list[ClaimedPass]


def turn(
    engine: Database,
    programa_id: str,
    *,
    filas: int,
    fans: int,
    now: datetime,
    lease_until: datetime,
) -> Turn:
    """One program's turn (see the module doc), its own transaction: fold up to `filas` of
    its oldest outbox rows into wallet_pases (folded balances are due at once), then claim
    up to `fans` fans due at `now` until `lease_until`."""
    rows = fetch_all(
        engine,
        TURN_SQL,
        {
            "programa": programa_id,
            "filas": filas,
            "fans": fans,
            "due": DUE_AT_ONCE,
            "now": now,
            "lease_until": lease_until,
        },
    )
    taken, folded = rows[0][:2]
    return Turn(
        int(taken),
        int(folded),
        [
            ClaimedPass(
                int(r[2]), int(r[3]), int(r[4]), int(r[5]), int(r[6]), r[7], programa_id, r[8]
            )
            for r in rows[1:]
        ],
    )


def ingest(engine: Database, programa_id: str, *, limit: int) -> tuple[int, int]:
    """Fold up to `limit` of the program's oldest outbox rows into wallet_pases, claiming
    nothing: (rows taken, fans whose balance changed)."""
    done = turn(engine, programa_id, filas=limit, fans=0, now=DUE_AT_ONCE, lease_until=DUE_AT_ONCE)
    return done.filas, done.plegados


class Outcome(NamedTuple):
    """What to record of one claimed fan's attempt (loyalty_wallet_record's columns; the
    fan is (`programa_id`, `fan_pk`)): `cubierto`, the balance (`saldo_version`,
    `saldo_id`) is settled; `intentos` and `proximo` (next try), the new values;
    `entregado`, the balance delivered; `error`, the new `ultimo_error` (None: unchanged)."""

    programa_id: str
    fan_pk: int
    saldo_id: int
    saldo_version: int
    cubierto: bool
    intentos: int
    proximo: datetime
    entregado: int | None
    error: str | None


def record_outcomes(
    engine: Database, outcomes: Sequence[Outcome], *, lease_until: datetime, at: datetime
) -> set[tuple[str, int]]:
    """Record every outcome, one call (one transaction) per program, for the fans whose
    lease (`lease_until`) is still ours; `at` is the time of deliveries and errors.
    Returns the fans recorded, (program, fan_pk)."""
    by_program: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_program.setdefault(o.programa_id, []).append(o)
    recorded: set[tuple[str, int]] = set()
    for programa_id, mine in by_program.items():
        rows = fetch_all(
            engine,
            RECORD_SQL,
            {
                "programa": programa_id,
                "fan_pks": [o.fan_pk for o in mine],
                "saldo_ids": [o.saldo_id for o in mine],
                "versiones": [o.saldo_version for o in mine],
                "cubiertos": [o.cubierto for o in mine],
                "intentos": [o.intentos for o in mine],
                "proximos": [o.proximo for o in mine],
                "entregados": [o.entregado for o in mine],
                "errores": [o.error for o in mine],
                "lease_until": lease_until,
                "due": DUE_AT_ONCE,
                "at": at,
            },
        )
        recorded.update((programa_id, int(r[0])) for r in rows)
    return recorded


class BacklogCounts(NamedTuple):
    """BACKLOG_SQL's row: waiting balances (`pases`) and outbox rows (`filas`) counted up
    to the cap, the fans among both (`fans`), those leased or in back-off (`esperando`),
    the oldest balance's age (None when none waits), and PostgreSQL's estimates beyond the
    cap (None when unknown)."""

    pases: int
    filas: int
    fans: int
    esperando: int
    oldest_seconds: float | None
    pases_estimadas: float | None
    filas_estimadas: int | None


def backlog_counts(conn: Connection, *, cap: int, now: datetime) -> BacklogCounts:
    """The backlog's counts, each part up to `cap`; `now` is the sender's clock for
    `esperando`. Runs in the connection's transaction, planned for its parameters (as the
    sender's statements are)."""
    conn.exec_driver_sql(_CUSTOM_PLANS_HERE)
    row = conn.execute(BACKLOG_SQL, {"cap": cap, "now": now}).one()
    return BacklogCounts(
        pases=int(row.pases),
        filas=int(row.filas),
        fans=int(row.fans),
        esperando=int(row.esperando),
        oldest_seconds=None if row.oldest_seconds is None else float(row.oldest_seconds),
        pases_estimadas=None if row.pases_estimadas is None else float(row.pases_estimadas),
        filas_estimadas=None if row.filas_estimadas is None else int(row.filas_estimadas),
    )


def record_deliveries(
    conn: Connection,
    proveedor: str,
    programas: Sequence[str],
    fan_pks: Sequence[int],
    saldos: Sequence[int],
) -> None:
    """Record one delivery per fan (programas[i], fan_pks[i]) of saldos[i] by `proveedor`,
    in one statement."""
    conn.execute(
        RECORD_DELIVERIES_SQL,
        {
            "proveedor": proveedor,
            "programas": list(programas),
            "fan_pks": list(fan_pks),
            "saldos": list(saldos),
        },
    )
