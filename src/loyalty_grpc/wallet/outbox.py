"""Delivering the outbox: the latest balance per fan goes to the wallet provider, at a cost
per run bounded by its batch sizes, whatever the backlog.

Sales only ever INSERT (fan, balance) into `wallet_outbox`. One run (`send_pending`; the
statements, their locking and what each guarantees are in store/wallet.py):

1-2. Rounds over the programs (`programas`), program by program (on Citus each program's
   rows are on one node): each program's turn (`store.wallet.turn`, one call, its own
   transaction) folds up to `ingest_batch` of its oldest outbox rows into each fan's
   `wallet_pases` row, the latest balance per fan (rows ingested before fans are claimed:
   a fan's many balances go out as one), then claims up to its share of the batch: due
   fans, longest-waiting first, never a fan another process claimed, leased until now +
   `lease` (the lease keeps other senders off the fan while its delivery runs, without
   any transaction or row lock held across the provider call: a long transaction would
   hold back vacuum and the roster feed's horizon). Fair: the first round gives every
   program a turn with an equal share of the batch (at least one fan), starting after
   the program where the previous run's first round stopped (`Rotation`), so a program
   with a huge backlog cannot starve the others; a program with nothing waiting costs
   one cheap call. Later rounds, up to `ingest_rounds` in all, go only to the programs
   that filled their share or their ingest, with what is left of the batch (a round of
   ingest alone once the batch is full, while the outbox rows taken stay under
   `ingest_rounds` × `ingest_batch`); a backlog larger than that is coalesced over the
   next runs.
3. Deliver, outside any transaction: one `deliver_batch` call for a BatchWalletProvider
   (the local one: one INSERT), else `deliver` per fan, `workers` at a time.
4. Record (`store.wallet.record_outcomes`, one statement for the batch), only where the
   lease is still ours: delivered → clear the balance if it is still the one delivered (a
   newer one folded in meanwhile stays, due at once), reset the attempts; failed → keep
   the balance, count the attempt and back off exponentially (1 s, 2 s, 4 s … capped at
   5 min, or the provider's Retry-After; a newer balance folded in meanwhile waits for
   that attempt); permanent failure → drop that balance (the next change tries again) and
   record the error; handed back unattempted → due again at once.

A sale never waits for a sender, and a fan in back-off is outside the claim's index
range, so it holds up no other fan. Delivery is at least once: a sender that dies after
delivering and before recording leaves the fan to be delivered again when the lease runs
out (the balance is absolute, so that is harmless). A lease must outlive one delivery: a
run starts no new delivery after half the lease and hands its remaining claims back.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from loyalty_grpc.store import wallet as wallet_store
from loyalty_grpc.store.db import Database
from loyalty_grpc.store.wallet import DUE_AT_ONCE, ClaimedPass, Outcome
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
# Outbox rows one ingest statement takes, and statements per run at most.
INGEST_BATCH = 5000
INGEST_ROUNDS = 20
# Longest error text kept in wallet_pases.ultimo_error.
_ERROR_CHARS = 500


def utcnow() -> datetime:
    return datetime.now(UTC)


def backoff(intentos: int) -> timedelta:
    """Wait after the `intentos`-th consecutive failure: 1 s, 2 s, 4 s … at most 5 min."""
    if intentos < 1:
        return timedelta(0)
    # 2**9 s already exceeds the cap; no huge powers in long outages.
    return min(BACKOFF_FIRST * (1 << min(intentos - 1, 16)), BACKOFF_CAP)


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
    saldo_version: int
    intentos: int


class Rotation:
    """Where the next run's first round starts: after the program where the previous
    one's stopped (one process's runs; thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._after = ""

    def order(self, programs: Sequence[str]) -> list[str]:
        """`programs` (sorted) starting after the last one recorded, wrapping round."""
        with self._lock:
            i = bisect.bisect_right(programs, self._after)
        return [*programs[i:], *programs[:i]]

    def stopped_after(self, programa_id: str) -> None:
        with self._lock:
            self._after = programa_id


# The rotation of this process's runs (a test may pass its own).
ROTATION = Rotation()


class _NotAttemptedError(Exception):
    """The outcome of a claim handed back unattempted."""


def send_pending(
    engine: Database,
    provider: WalletProvider,
    *,
    batch: int = 100,
    workers: int = 4,
    now: Callable[[], datetime] = utcnow,
    lease: timedelta = DEFAULT_LEASE,
    stop: threading.Event | None = None,
    ingest_batch: int = INGEST_BATCH,
    ingest_rounds: int = INGEST_ROUNDS,
    rotation: Rotation | None = None,
) -> SendReport:
    """One run (see the module doc): fold in up to `ingest_batch` outbox rows per program
    and round (`ingest_rounds` × `ingest_batch` at most once the batch is full), then
    deliver the latest balance of up to `batch` due fans, up to `workers`
    provider calls at a time for a provider without `deliver_batch` (a wallet API is
    latency-bound; the provider must be thread-safe when `workers` > 1). `now` is the
    clock of leases and back-off (tests pass their own). `more` in the report: call again
    at once."""
    if min(batch, workers, ingest_batch, ingest_rounds) < 1:
        raise ValueError("batch, workers, ingest_batch and ingest_rounds must be at least 1")
    deadline = time.monotonic() + lease.total_seconds() / 2
    claimed_at = now()
    lease_until = claimed_at + lease
    claimed, ingested, more = _rounds(
        engine,
        (rotation or ROTATION),
        batch=batch,
        ingest_batch=ingest_batch,
        ingest_rounds=ingest_rounds,
        now=claimed_at,
        lease_until=lease_until,
    )
    claims = _claims(claimed)
    if not claims:
        return SendReport(ingested=ingested, more=more)

    def go_on() -> bool:
        return not ((stop is not None and stop.is_set()) or time.monotonic() > deadline)

    outcomes = _deliver(provider, claims, workers=workers, go_on=go_on)
    report = _record(engine, claims, outcomes, lease_until=lease_until, at=now())
    return report + SendReport(ingested=ingested, more=more)


def drain(
    engine: Database,
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


def _rounds(
    engine: Database,
    rotation: Rotation,
    *,
    batch: int,
    ingest_batch: int,
    ingest_rounds: int,
    now: datetime,
    lease_until: datetime,
) -> tuple[list[ClaimedPass], int, bool]:
    """The run's rounds over the programs (see the module doc): the fans claimed, the
    outbox rows ingested, and whether work is left for another run at once."""
    claimed: list[ClaimedPass] = []
    ingested = 0
    order = rotation.order(wallet_store.programs(engine))
    if not order:
        return claimed, ingested, False
    turns = order
    refolded = False
    for round_ in range(ingest_rounds):
        left = batch - len(claimed)
        if left == 0 and ingested >= ingest_rounds * ingest_batch:
            break
        share = max(1, left // len(turns))
        hungry: list[str] = []
        for i, programa_id in enumerate(turns):
            fans = min(share, batch - len(claimed))
            if fans == 0 and round_ == 0:
                # The batch is full: the next run's first round starts here.
                rotation.stopped_after(turns[i - 1])
                return claimed, ingested, True
            done = wallet_store.turn(
                engine,
                programa_id,
                filas=ingest_batch,
                fans=fans,
                now=now,
                lease_until=lease_until,
            )
            ingested += done.filas
            claimed.extend(done.claimed)
            # A later round's fold may have refreshed a fan claimed before it: that fan
            # (and any fan folded and not claimed) is due again at once after this run.
            refolded = refolded or (round_ > 0 and done.plegados > 0)
            if done.filas == ingest_batch or (fans > 0 and len(done.claimed) == fans):
                hungry.append(programa_id)
        if round_ == 0:
            rotation.stopped_after(order[0])
        turns = hungry
        if not turns:
            break
    # More at once: a full batch, a program still hungry, or a fan refreshed meanwhile.
    return claimed, ingested, refolded or len(claimed) == batch or bool(turns)


def _claims(claimed: Sequence[ClaimedPass]) -> list[_Claim]:
    # Longest-waiting first.
    rows = sorted(claimed, key=lambda r: r.pendiente_desde)
    return [
        _Claim(
            FanPass(r.fan_pk, r.programa_id, r.fan_id),
            r.saldo_pendiente,
            r.saldo_id,
            r.saldo_version,
            r.intentos,
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
    engine: Database,
    claims: Sequence[_Claim],
    outcomes: Sequence[Exception | None],
    *,
    lease_until: datetime,
    at: datetime,
) -> SendReport:
    """Write every outcome, one call per program (see the module doc)."""
    recorded: list[Outcome] = []
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
        recorded.append(
            Outcome(
                fan.programa_id,
                fan.fan_pk,
                claim.saldo_id,
                claim.saldo_version,
                cubierto,
                intentos,
                proximo,
                entregado,
                error,
            )
        )
    owned = wallet_store.record_outcomes(engine, recorded, lease_until=lease_until, at=at)
    lost = [c.fan for c in claims if (c.fan.programa_id, c.fan.fan_pk) not in owned]
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
