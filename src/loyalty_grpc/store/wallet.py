"""The wallet sender's statements (wallet/outbox.py runs them, wallet/backlog.py reads the
backlog, wallet/providers.py records local deliveries): tables `wallet_outbox`,
`wallet_pases` and `wallet_entregas`.

- `ingest` (`INGEST_SQL`, one statement): delete the oldest outbox rows by id (`ORDER BY
  id LIMIT n FOR UPDATE SKIP LOCKED`, each row then deleted by its (programa_id, id)) and
  fold the latest balance per fan into the fan's `wallet_pases` row (`saldo_pendiente`,
  `saldo_id`), creating it when needed. A fold only replaces a balance with one from a
  higher outbox id: for one fan, ids follow the order of its balance changes (each holds
  the fan's row lock until it commits), so that is the newer balance, even when two
  senders fold a fan's rows in the wrong order. Rows of different fans commit out of id
  order; a row committed after a run took higher ids is simply the lowest one left for the
  next run (no high-water mark, nothing skipped). Rows are upserted in (program, fan)
  order, so concurrent senders cannot deadlock; delete and fold commit together, so a sender that
  dies loses nothing.
- `claim` (`CLAIM_SQL`): up to `batch` fans whose balance waits and whose
  `proximo_intento` has passed (a range scan of the partial index ix_wallet_pases_due,
  longest-waiting first, `FOR UPDATE SKIP LOCKED`: several processes never claim the same
  fan), setting `proximo_intento` to the lease's end.
- `record_outcomes` (`RECORD_SQL`, one statement for the batch), only where the lease is
  still ours (`proximo_intento` unchanged), locking the rows in (program, fan) order first
  (no deadlock with an ingest): a settled attempt (delivered, or dropped as a permanent
  failure) clears the balance if it is still the one attempted (a newer one folded in
  meanwhile stays, due at once); otherwise the balance stays with the attempts and next
  try given.
- `backlog_counts` (`BACKLOG_SQL`): bounded counts of the backlog (wallet/backlog.py says
  what they mean).
- `record_deliveries`: the local provider's deliveries, a batch per INSERT.

These statements serve every program at once (one sender for the whole database); each
row is still found by its program's key, (programa_id, fan_pk) or (programa_id, id), and
the fans joined on (programa_id, pk). A set of rows chosen first is found again by two
arrays, `programa_id = ANY (…) AND id = ANY (…)` (index lookups of the primary key; a join
with the chosen rows would be planned as a hash join over the whole table): exact, because
an id (`wallet_outbox.id`, `fans.pk`) is unique across programs, so a row whose id was
chosen is the chosen row.

A sale never waits for a sender: senders lock only `wallet_pases` rows and the outbox rows
they take. Every statement is SQL text built once, here. The sender's connections plan
each execution for its parameters (`plan_cache_mode = force_custom_plan`, see
`custom_plans`): a plan cached while the outbox was empty (a sequential scan) must never
serve a backlog of a million rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final, NamedTuple

from sqlalchemy import Connection, text

# `proximo_intento` of a fan that is due at once, whatever a sender's clock says (several
# processes' clocks differ a little; `now` is injectable).
DUE_AT_ONCE = datetime(1970, 1, 1, tzinfo=UTC)

INGEST_SQL: Final = text("""
WITH elegidas AS MATERIALIZED (
    SELECT programa_id, id FROM wallet_outbox ORDER BY id LIMIT :n FOR UPDATE SKIP LOCKED
), tomadas AS (
    DELETE FROM wallet_outbox
    WHERE programa_id = ANY (ARRAY(SELECT programa_id FROM elegidas))
      AND id = ANY (ARRAY(SELECT id FROM elegidas))
    RETURNING programa_id, fan_pk, id, saldo, creado
), ultimas AS (
    SELECT programa_id, fan_pk, max(id) AS id,
           (array_agg(saldo ORDER BY id DESC))[1] AS saldo, min(creado) AS desde
    FROM tomadas GROUP BY programa_id, fan_pk
), plegadas AS (
    INSERT INTO wallet_pases AS p (programa_id, fan_pk, saldo_pendiente, saldo_id,
                                   pendiente_desde, proximo_intento)
    SELECT programa_id, fan_pk, saldo, id, desde, :due FROM ultimas
    ORDER BY programa_id, fan_pk
    ON CONFLICT (programa_id, fan_pk) DO UPDATE
        SET saldo_pendiente = excluded.saldo_pendiente, saldo_id = excluded.saldo_id,
            pendiente_desde = least(p.pendiente_desde, excluded.pendiente_desde)
        WHERE p.saldo_id IS NULL OR p.saldo_id < excluded.saldo_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM tomadas) AS filas, (SELECT count(*) FROM plegadas) AS fans
""")

CLAIM_SQL: Final = text("""
WITH elegidas AS MATERIALIZED (
    SELECT programa_id, fan_pk FROM wallet_pases
    WHERE pendiente_desde IS NOT NULL AND proximo_intento <= :now
    ORDER BY proximo_intento, pendiente_desde
    LIMIT :n FOR UPDATE SKIP LOCKED
)
UPDATE wallet_pases AS p SET proximo_intento = :lease_until
FROM fans AS f
WHERE p.programa_id = ANY (ARRAY(SELECT programa_id FROM elegidas))
  AND p.fan_pk = ANY (ARRAY(SELECT fan_pk FROM elegidas))
  AND f.programa_id = p.programa_id AND f.pk = p.fan_pk
RETURNING p.fan_pk, p.saldo_pendiente, p.saldo_id, p.intentos, p.pendiente_desde,
          f.programa_id, f.fan_id
""")

# Per fan: `cubierto` — the attempt settled the balance (delivered, or dropped as a
# permanent failure); `intentos`, `proximo` — the new values; `entregado` — the balance
# delivered; `error` — the new `ultimo_error`. NULL means unchanged.
RECORD_SQL: Final = text("""
WITH r AS (
    SELECT * FROM unnest(CAST(:programas AS text[]), CAST(:fan_pks AS bigint[]),
                         CAST(:saldo_ids AS bigint[]),
                         CAST(:cubiertos AS boolean[]), CAST(:intentos AS integer[]),
                         CAST(:proximos AS timestamptz[]), CAST(:entregados AS bigint[]),
                         CAST(:errores AS text[]))
        AS r(programa_id, fan_pk, saldo_id, cubierto, intentos, proximo, entregado, error)
), nuestras AS MATERIALIZED (
    SELECT programa_id, fan_pk FROM wallet_pases
    WHERE programa_id = ANY (CAST(:de_programas AS text[]))
      AND fan_pk = ANY (CAST(:fan_pks AS bigint[])) AND proximo_intento = :lease_until
    ORDER BY programa_id, fan_pk
    FOR UPDATE
)
UPDATE wallet_pases AS p SET
    intentos = r.intentos,
    proximo_intento = CASE WHEN r.cubierto AND p.saldo_id = r.saldo_id
                           THEN CAST(:due AS timestamptz) ELSE r.proximo END,
    saldo_pendiente = CASE WHEN r.cubierto AND p.saldo_id = r.saldo_id
                           THEN NULL ELSE p.saldo_pendiente END,
    pendiente_desde = CASE WHEN r.cubierto AND p.saldo_id = r.saldo_id THEN NULL
                           WHEN r.cubierto THEN now() ELSE p.pendiente_desde END,
    entregado_saldo = coalesce(r.entregado, p.entregado_saldo),
    entregado_en = CASE WHEN r.entregado IS NULL THEN p.entregado_en ELSE :at END,
    ultimo_error = coalesce(r.error, p.ultimo_error),
    error_en = CASE WHEN r.error IS NULL THEN p.error_en ELSE :at END
FROM r JOIN nuestras AS n ON n.programa_id = r.programa_id AND n.fan_pk = r.fan_pk
WHERE p.programa_id = r.programa_id AND p.fan_pk = r.fan_pk
RETURNING p.fan_pk
""")

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

_CUSTOM_PLANS: Final = "SET plan_cache_mode = force_custom_plan"
_CUSTOM_PLANS_HERE: Final = "SET LOCAL plan_cache_mode = force_custom_plan"


def custom_plans(conn: Connection) -> None:
    """Make this pooled connection plan every execution for its parameters, once per
    database connection (the setting stays with it). Call it first on a connection just
    checked out: it commits. psycopg prepares a statement after a few executions, and
    PostgreSQL may then reuse one generic plan: chosen while the outbox was nearly empty,
    that is a sequential scan and a sort, which on a large backlog costs seconds per
    claim. Planning these statements costs well under a millisecond."""
    if conn.info.get("loyalty_custom_plans"):
        return
    conn.exec_driver_sql(_CUSTOM_PLANS)
    conn.commit()
    conn.info["loyalty_custom_plans"] = True


def ingest(conn: Connection, *, limit: int) -> tuple[int, int]:
    """Fold up to `limit` of the oldest outbox rows into wallet_pases, in the connection's
    transaction (see the module doc): (rows taken, fans whose balance changed). Folded
    balances are due at once."""
    rows, fans = conn.execute(INGEST_SQL, {"n": limit, "due": DUE_AT_ONCE}).one()
    return int(rows), int(fans)


class ClaimedPass(NamedTuple):
    """A fan claimed for delivery: its balance waiting (`saldo_pendiente`, from outbox row
    `saldo_id`), its failed attempts so far, since when a balance waits, and its pass."""

    fan_pk: int
    saldo_pendiente: int
    saldo_id: int
    intentos: int
    pendiente_desde: datetime
    programa_id: str
    fan_id: str


def claim(
    conn: Connection, *, batch: int, now: datetime, lease_until: datetime
) -> list[ClaimedPass]:
    """Claim up to `batch` fans due at `now` until `lease_until`, in the connection's
    transaction (see the module doc); in no particular order."""
    rows = conn.execute(CLAIM_SQL, {"n": batch, "now": now, "lease_until": lease_until}).all()
    return [
        ClaimedPass(
            int(r.fan_pk),
            int(r.saldo_pendiente),
            int(r.saldo_id),
            int(r.intentos),
            r.pendiente_desde,
            r.programa_id,
            r.fan_id,
        )
        for r in rows
    ]


class Outcome(NamedTuple):
    """What to record of one claimed fan's attempt (RECORD_SQL's columns; the fan is
    (`programa_id`, `fan_pk`)): `cubierto`, the
    balance `saldo_id` is settled; `intentos` and `proximo` (next try), the new values;
    `entregado`, the balance delivered; `error`, the new `ultimo_error` (None: unchanged)."""

    programa_id: str
    fan_pk: int
    saldo_id: int
    cubierto: bool
    intentos: int
    proximo: datetime
    entregado: int | None
    error: str | None


def record_outcomes(
    conn: Connection, outcomes: Sequence[Outcome], *, lease_until: datetime, at: datetime
) -> set[int]:
    """Record every outcome in one statement, in the connection's transaction, for the fans
    whose lease (`lease_until`) is still ours; `at` is the time of deliveries and errors.
    Returns the fans recorded."""
    columns = {
        "programas": [o.programa_id for o in outcomes],
        "fan_pks": [o.fan_pk for o in outcomes],
        "saldo_ids": [o.saldo_id for o in outcomes],
        "cubiertos": [o.cubierto for o in outcomes],
        "intentos": [o.intentos for o in outcomes],
        "proximos": [o.proximo for o in outcomes],
        "entregados": [o.entregado for o in outcomes],
        "errores": [o.error for o in outcomes],
    }
    # The programs once each (the rows' lookup), as well as per row.
    de_programas = sorted({o.programa_id for o in outcomes})
    return set(
        conn.execute(
            RECORD_SQL,
            {
                **columns,
                "de_programas": de_programas,
                "lease_until": lease_until,
                "due": DUE_AT_ONCE,
                "at": at,
            },
        ).scalars()
    )


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
    sender's statements are, see `custom_plans`)."""
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
