"""Delivering the outbox: the latest balance per fan goes to the wallet provider, at a cost
per run bounded by its batch sizes, whatever the backlog.

Sales only ever INSERT (fan, balance) into `wallet_outbox`. One run (`send_pending`):

1. Ingest (`INGEST_SQL`, one statement): delete the oldest outbox rows by id (`ORDER BY id
   LIMIT n FOR UPDATE SKIP LOCKED`: an index range scan of the primary key) and fold the
   latest balance per fan into the fan's `wallet_pases` row (`saldo_pendiente`,
   `saldo_id`), creating it when needed. A fold only replaces a balance with one from a
   higher outbox id: for one fan, ids follow the order of its balance changes (each holds
   the fan's row lock until it commits), so that is the newer balance, even when two
   senders fold a fan's rows in the wrong order. Rows of different fans commit out of
   id order; a row committed after a run took higher ids is simply the lowest one left
   for the next run (no high-water mark, nothing skipped). Rows are upserted in fan order,
   so concurrent senders cannot deadlock; delete and fold commit together, so a sender
   that dies loses nothing. Up to `ingest_rounds` statements of `ingest_batch` rows, each
   committed, the last in the claim's transaction; a backlog larger than that is coalesced
   over the next runs (rows ingested before fans are claimed: a fan's many balances go out
   as one).
2. Claim (`CLAIM_SQL`): up to `batch` fans whose balance waits and whose `proximo_intento`
   has passed (a range scan of the partial index ix_wallet_pases_due, longest-waiting
   first, `FOR UPDATE SKIP LOCKED`: several processes never claim the same fan), and set
   `proximo_intento` to now + `lease`: the lease keeps other senders off the fan while
   its delivery runs, without any transaction or row lock held across the provider call
   (a long transaction would hold back vacuum and the roster feed's horizon).
3. Deliver, outside any transaction: one `deliver_batch` call for a BatchWalletProvider
   (the local one: one INSERT), else `deliver` per fan, `workers` at a time.
4. Record (`RECORD_SQL`, one statement for the batch), only where the lease is still ours
   (`proximo_intento` unchanged), locking the rows in fan order first (no deadlock with
   an ingest): delivered → clear the balance if it is still the one delivered (a newer
   one folded in meanwhile stays, due at once), reset the attempts; failed → keep the
   balance, count the attempt and back off exponentially (1 s, 2 s, 4 s … capped at
   5 min, or the provider's Retry-After; a newer balance folded in meanwhile waits for
   that attempt); permanent failure → drop that balance (the next change tries again) and
   record the error; handed back unattempted → due again at once.

A sale never waits for a sender (senders lock only `wallet_pases` rows and the outbox
rows they take), and a fan in back-off is outside the claim's index range, so it holds
up no other fan. Delivery is at least once: a sender that dies after delivering and
before recording leaves the fan to be delivered again when the lease runs out (the
balance is absolute, so that is harmless). A lease must outlive one delivery: a run
starts no new delivery after half the lease and hands its remaining claims back.

Every statement is SQL text built once, here. The sender's connections plan each
execution for its parameters (`plan_cache_mode = force_custom_plan`, see
`custom_plans`): a plan cached while the outbox was empty (a sequential scan) must never
serve a backlog of a million rows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final

from sqlalchemy import Connection, Engine, text

from loyalty_grpc.wallet.failures import FailureLog
from loyalty_grpc.wallet.providers import (
    BatchWalletProvider,
    Delivery,
    FanPass,
    WalletDeliveryError,
    WalletProvider,
)

log = logging.getLogger(__name__)
# A batch provider that keeps failing (the local provider's table missing, the database
# gone between claim and delivery): one traceback, then at most a line a minute.
BATCH_FAILURES = FailureLog(log, recovered="wallet: batch deliveries work again", every=60.0)

BACKOFF_FIRST = timedelta(seconds=1)
BACKOFF_CAP = timedelta(minutes=5)
DEFAULT_LEASE = timedelta(minutes=5)
# `proximo_intento` of a fan that is due at once, whatever a sender's clock says (several
# processes' clocks differ a little; `now` is injectable).
DUE_AT_ONCE = datetime(1970, 1, 1, tzinfo=UTC)
# Outbox rows one ingest statement takes, and statements per run at most.
INGEST_BATCH = 5000
INGEST_ROUNDS = 20
# Longest error text kept in wallet_pases.ultimo_error.
_ERROR_CHARS = 500

INGEST_SQL: Final = text("""
WITH tomadas AS (
    DELETE FROM wallet_outbox
    WHERE id = ANY (ARRAY(SELECT id FROM wallet_outbox ORDER BY id
                          LIMIT :n FOR UPDATE SKIP LOCKED))
    RETURNING fan_pk, id, saldo, creado
), ultimas AS (
    SELECT fan_pk, max(id) AS id, (array_agg(saldo ORDER BY id DESC))[1] AS saldo,
           min(creado) AS desde
    FROM tomadas GROUP BY fan_pk
), plegadas AS (
    INSERT INTO wallet_pases AS p (fan_pk, saldo_pendiente, saldo_id, pendiente_desde,
                                   proximo_intento)
    SELECT fan_pk, saldo, id, desde, :due FROM ultimas ORDER BY fan_pk
    ON CONFLICT (fan_pk) DO UPDATE
        SET saldo_pendiente = excluded.saldo_pendiente, saldo_id = excluded.saldo_id,
            pendiente_desde = least(p.pendiente_desde, excluded.pendiente_desde)
        WHERE p.saldo_id IS NULL OR p.saldo_id < excluded.saldo_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM tomadas) AS filas, (SELECT count(*) FROM plegadas) AS fans
""")

CLAIM_SQL: Final = text("""
UPDATE wallet_pases AS p SET proximo_intento = :lease_until
FROM fans AS f
WHERE p.fan_pk = ANY (ARRAY(
        SELECT fan_pk FROM wallet_pases
        WHERE pendiente_desde IS NOT NULL AND proximo_intento <= :now
        ORDER BY proximo_intento, pendiente_desde
        LIMIT :n FOR UPDATE SKIP LOCKED))
  AND f.pk = p.fan_pk
RETURNING p.fan_pk, p.saldo_pendiente, p.saldo_id, p.intentos, p.pendiente_desde,
          f.programa_id, f.fan_id
""")

# Per fan: `cubierto` — the attempt settled the balance (delivered, or dropped as a
# permanent failure); `intentos`, `proximo` — the new values; `entregado` — the balance
# delivered; `error` — the new `ultimo_error`. NULL means unchanged.
RECORD_SQL: Final = text("""
WITH r AS (
    SELECT * FROM unnest(CAST(:fan_pks AS bigint[]), CAST(:saldo_ids AS bigint[]),
                         CAST(:cubiertos AS boolean[]), CAST(:intentos AS integer[]),
                         CAST(:proximos AS timestamptz[]), CAST(:entregados AS bigint[]),
                         CAST(:errores AS text[]))
        AS r(fan_pk, saldo_id, cubierto, intentos, proximo, entregado, error)
), nuestras AS MATERIALIZED (
    SELECT fan_pk FROM wallet_pases
    WHERE fan_pk = ANY (CAST(:fan_pks AS bigint[])) AND proximo_intento = :lease_until
    ORDER BY fan_pk
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
FROM r JOIN nuestras AS n ON n.fan_pk = r.fan_pk
WHERE p.fan_pk = r.fan_pk
RETURNING p.fan_pk
""")

_CUSTOM_PLANS: Final = "SET plan_cache_mode = force_custom_plan"


def utcnow() -> datetime:
    return datetime.now(UTC)


def backoff(intentos: int) -> timedelta:
    """Wait after the `intentos`-th consecutive failure: 1 s, 2 s, 4 s … at most 5 min."""
    if intentos < 1:
        return timedelta(0)
    # 2**9 s already exceeds the cap; no huge powers in long outages.
    return min(BACKOFF_FIRST * (1 << min(intentos - 1, 16)), BACKOFF_CAP)


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


@dataclass(frozen=True)
class SendReport:
    """What one run (or several, added up) did with its claims: `claimed` = `delivered` +
    `retrying` + `dropped` + `released`. `ingested` (outbox rows folded in) and `more` (the
    run stopped at a limit: a full batch of claims, or all its ingest rounds full, so
    another run has work at once) are not part of equality."""

    claimed: int = 0
    delivered: int = 0
    # Failed, to be retried after a back-off.
    retrying: int = 0
    # Failed permanently (e.g. the fan has no pass): not retried for that balance.
    dropped: int = 0
    # Claimed but handed back unattempted (stopping, or the lease budget ran out).
    released: int = 0
    ingested: int = field(default=0, compare=False)
    more: bool = field(default=False, compare=False)

    def __add__(self, other: SendReport) -> SendReport:
        return SendReport(
            claimed=self.claimed + other.claimed,
            delivered=self.delivered + other.delivered,
            retrying=self.retrying + other.retrying,
            dropped=self.dropped + other.dropped,
            released=self.released + other.released,
            ingested=self.ingested + other.ingested,
            more=other.more,
        )

    def summary(self) -> str:
        return (
            f"{self.delivered} delivered, {self.retrying} to retry, "
            f"{self.dropped} dropped, {self.released} released"
        )


@dataclass(frozen=True)
class _Claim:
    fan: FanPass
    saldo: int
    saldo_id: int
    intentos: int


class _NotAttemptedError(Exception):
    """The outcome of a claim handed back unattempted."""


def send_pending(
    engine: Engine,
    provider: WalletProvider,
    *,
    batch: int = 100,
    workers: int = 4,
    now: Callable[[], datetime] = utcnow,
    lease: timedelta = DEFAULT_LEASE,
    stop: threading.Event | None = None,
    ingest_batch: int = INGEST_BATCH,
    ingest_rounds: int = INGEST_ROUNDS,
) -> SendReport:
    """One run (see the module doc): fold in up to `ingest_rounds` × `ingest_batch` outbox
    rows, then deliver the latest balance of up to `batch` due fans, up to `workers`
    provider calls at a time for a provider without `deliver_batch` (a wallet API is
    latency-bound; the provider must be thread-safe when `workers` > 1). `now` is the
    clock of leases and back-off (tests pass their own). `more` in the report: call again
    at once."""
    if min(batch, workers, ingest_batch, ingest_rounds) < 1:
        raise ValueError("batch, workers, ingest_batch and ingest_rounds must be at least 1")
    deadline = time.monotonic() + lease.total_seconds() / 2
    with engine.connect() as conn:
        custom_plans(conn)
        ingested, outbox_left = 0, True
        for _ in range(ingest_rounds):
            rows, _fans = ingest(conn, limit=ingest_batch)
            ingested += rows
            if rows < ingest_batch:
                outbox_left = False
                break
            conn.commit()
        claimed_at = now()
        lease_until = claimed_at + lease
        claims = _claim(conn, batch=batch, now=claimed_at, lease_until=lease_until)
        conn.commit()
    more = outbox_left or len(claims) == batch
    if not claims:
        return SendReport(ingested=ingested, more=more)

    def go_on() -> bool:
        return not ((stop is not None and stop.is_set()) or time.monotonic() > deadline)

    outcomes = _deliver(provider, claims, workers=workers, go_on=go_on)
    report = _record(engine, claims, outcomes, lease_until=lease_until, at=now())
    return report + SendReport(ingested=ingested, more=more)


def drain(
    engine: Engine,
    provider: WalletProvider,
    *,
    batch: int = 100,
    workers: int = 4,
    now: Callable[[], datetime] = utcnow,
    stop: threading.Event | None = None,
    ingest_batch: int = INGEST_BATCH,
    ingest_rounds: int = INGEST_ROUNDS,
) -> SendReport:
    """`send_pending` until a run finds nothing more to do at once (or `stop` is set):
    everything due is delivered once (failures wait for their back-off)."""
    total = SendReport()
    while stop is None or not stop.is_set():
        report = send_pending(
            engine,
            provider,
            batch=batch,
            workers=workers,
            now=now,
            stop=stop,
            ingest_batch=ingest_batch,
            ingest_rounds=ingest_rounds,
        )
        total += report
        if not report.more:
            break
    return total


def ingest(conn: Connection, *, limit: int) -> tuple[int, int]:
    """Fold up to `limit` of the oldest outbox rows into wallet_pases, in the connection's
    transaction (step 1 of the module doc): (rows taken, fans whose balance changed)."""
    rows, fans = conn.execute(INGEST_SQL, {"n": limit, "due": DUE_AT_ONCE}).one()
    return int(rows), int(fans)


def _claim(conn: Connection, *, batch: int, now: datetime, lease_until: datetime) -> list[_Claim]:
    rows = conn.execute(CLAIM_SQL, {"n": batch, "now": now, "lease_until": lease_until}).all()
    # Longest-waiting first.
    rows = sorted(rows, key=lambda r: r.pendiente_desde)
    return [
        _Claim(
            FanPass(int(r.fan_pk), r.programa_id, r.fan_id),
            int(r.saldo_pendiente),
            int(r.saldo_id),
            int(r.intentos),
        )
        for r in rows
    ]


def _deliver(
    provider: WalletProvider, claims: Sequence[_Claim], *, workers: int, go_on: Callable[[], bool]
) -> list[Exception | None]:
    """One outcome per claim: None (delivered), _NotAttemptedError, or the failure."""
    if isinstance(provider, BatchWalletProvider):
        if not go_on():
            return [_NotAttemptedError() for _ in claims]
        try:
            outcomes = list(provider.deliver_batch([Delivery(c.fan, c.saldo) for c in claims]))
            if len(outcomes) != len(claims):
                raise RuntimeError(f"{len(outcomes)} outcomes for {len(claims)} deliveries")
        except Exception as exc:  # every delivery of the batch failed: retried
            BATCH_FAILURES.failed(exc, f"wallet: a batch of {len(claims)} deliveries failed")
            return [exc for _ in claims]
        BATCH_FAILURES.succeeded()
        for claim, outcome in zip(claims, outcomes, strict=True):
            if outcome is not None and not isinstance(outcome, WalletDeliveryError):
                log.error(
                    "wallet pass of %s/%s: unexpected error: %r",
                    claim.fan.programa_id,
                    claim.fan.fan_id,
                    outcome,
                )
        return outcomes

    def attempt(claim: _Claim) -> Exception | None:
        if not go_on():
            return _NotAttemptedError()
        try:
            provider.deliver(claim.fan, claim.saldo)
        except WalletDeliveryError as exc:
            return exc
        except Exception as exc:  # a provider bug must not stop the other fans
            log.exception(
                "wallet pass of %s/%s: unexpected error", claim.fan.programa_id, claim.fan.fan_id
            )
            return exc
        return None

    if workers == 1 or len(claims) == 1:
        return [attempt(claim) for claim in claims]
    with ThreadPoolExecutor(
        max_workers=min(workers, len(claims)), thread_name_prefix="wallet-delivery"
    ) as pool:
        return list(pool.map(attempt, claims))


def _record(
    engine: Engine,
    claims: Sequence[_Claim],
    outcomes: Sequence[Exception | None],
    *,
    lease_until: datetime,
    at: datetime,
) -> SendReport:
    """Write every outcome in one statement (see the module doc)."""
    columns: dict[str, list[object]] = {
        k: []
        for k in (
            "fan_pks",
            "saldo_ids",
            "cubiertos",
            "intentos",
            "proximos",
            "entregados",
            "errores",
        )
    }
    delivered = retrying = dropped = released = 0
    for claim, outcome in zip(claims, outcomes, strict=True):
        fan = claim.fan
        cubierto, intentos, proximo = True, 0, DUE_AT_ONCE
        entregado: int | None = None
        error: str | None = None
        if outcome is None:
            delivered += 1
            entregado = claim.saldo
        elif isinstance(outcome, _NotAttemptedError):
            released += 1
            cubierto, intentos = False, claim.intentos
        elif isinstance(outcome, WalletDeliveryError) and outcome.permanent:
            dropped += 1
            log.warning(
                "wallet pass of %s/%s: %s (balance %d dropped)",
                fan.programa_id,
                fan.fan_id,
                outcome,
                claim.saldo,
            )
            error = f"permanente: {outcome}"[:_ERROR_CHARS]
        else:
            retrying += 1
            cubierto, intentos = False, claim.intentos + 1
            wait = backoff(intentos)
            if isinstance(outcome, WalletDeliveryError):
                if outcome.retry_after is not None:
                    wait = max(wait, min(timedelta(seconds=outcome.retry_after), BACKOFF_CAP))
                error = str(outcome)[:_ERROR_CHARS]
            else:
                error = f"{type(outcome).__name__}: {outcome}"[:_ERROR_CHARS]
            proximo = at + wait
        for name, value in (
            ("fan_pks", fan.fan_pk),
            ("saldo_ids", claim.saldo_id),
            ("cubiertos", cubierto),
            ("intentos", intentos),
            ("proximos", proximo),
            ("entregados", entregado),
            ("errores", error),
        ):
            columns[name].append(value)
    with engine.connect() as conn:
        custom_plans(conn)
        owned = set(
            conn.execute(
                RECORD_SQL, {**columns, "lease_until": lease_until, "due": DUE_AT_ONCE, "at": at}
            ).scalars()
        )
        conn.commit()
    lost = [c.fan for c in claims if c.fan.fan_pk not in owned]
    if lost:
        log.warning(
            "wallet: the lease on %d fans (%s/%s …) expired during delivery; their "
            "outcome is left to their new owner",
            len(lost),
            lost[0].programa_id,
            lost[0].fan_id,
        )
    return SendReport(
        claimed=len(claims),
        delivered=delivered,
        retrying=retrying,
        dropped=dropped,
        released=released,
    )
