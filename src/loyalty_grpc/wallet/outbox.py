"""Delivering the outbox: the latest balance per fan goes to the wallet provider.

One run (`send_pending`):

1. Claim (one short transaction): make sure every fan with outbox rows has a
   `wallet_pases` row, then take up to `batch` fans whose `proximo_intento` is due with
   `FOR UPDATE SKIP LOCKED` (several processes never claim the same fan) and set their
   `proximo_intento` to now + `lease`: the lease keeps other senders off the fan while
   its delivery runs, without any transaction or row lock held across the provider call
   (a long transaction would hold back vacuum and the roster feed's horizon). Older
   outbox rows of the claimed fans are deleted (coalesced) and the latest row of each is
   read.
2. Deliver, a few fans at a time (`workers` threads), outside any transaction.
3. Record each outcome in its own short transaction, only if the fan's lease is still
   ours (`proximo_intento` unchanged): delivered → delete the fan's outbox rows up to
   the delivered one, reset the attempts, due again at once (`DUE_AT_ONCE`: a balance
   that arrived meanwhile goes out on the next run); failed → keep the row, count the
   attempt and back off exponentially (1 s, 2 s, 4 s … capped at 5 min; a newer balance
   arriving meanwhile waits for that attempt); permanent failure → drop the rows up to
   that one (the next balance change tries again) and record the error.

Sales only ever INSERT into `wallet_outbox`; senders only lock `wallet_pases` rows. So a
sale never waits for a sender, and a fan in back-off does not hold up any other fan.
For one fan, outbox ids follow the order of its balance changes (each change holds the
fan's row lock until it commits), so the highest id is the latest balance.

Delivery is at least once: a sender that dies after delivering and before recording
leaves the fan to be delivered again when the lease runs out (the balance is absolute,
so that is harmless). A lease must outlive one delivery: a run starts no new delivery
after half the lease and hands its remaining claims back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, DateTime, Engine, delete, exists, func, literal, select, update
from sqlalchemy.dialects.postgresql import insert

from loyalty_grpc.store.tables import fans, wallet_outbox, wallet_pases
from loyalty_grpc.wallet.providers import FanPass, WalletDeliveryError, WalletProvider

log = logging.getLogger(__name__)

BACKOFF_FIRST = timedelta(seconds=1)
BACKOFF_CAP = timedelta(minutes=5)
DEFAULT_LEASE = timedelta(minutes=5)
# `proximo_intento` of a fan that is due at once, whatever a sender's clock says (several
# processes' clocks differ a little; `now` is injectable).
DUE_AT_ONCE = datetime(1970, 1, 1, tzinfo=UTC)
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
    """What one run did. `claimed` = `delivered` + `retrying` + `dropped` + `released`."""

    claimed: int = 0
    delivered: int = 0
    # Failed, to be retried after a back-off.
    retrying: int = 0
    # Failed permanently (e.g. the fan has no pass): not retried for that balance.
    dropped: int = 0
    # Claimed but handed back unattempted (stopping, or the lease budget ran out).
    released: int = 0

    def __add__(self, other: SendReport) -> SendReport:
        return SendReport(
            claimed=self.claimed + other.claimed,
            delivered=self.delivered + other.delivered,
            retrying=self.retrying + other.retrying,
            dropped=self.dropped + other.dropped,
            released=self.released + other.released,
        )

    def summary(self) -> str:
        return (f"{self.delivered} delivered, {self.retrying} to retry, "
                f"{self.dropped} dropped, {self.released} released")


@dataclass(frozen=True)
class _Claim:
    fan: FanPass
    outbox_id: int
    saldo: int
    intentos: int


def send_pending(
    engine: Engine,
    provider: WalletProvider,
    *,
    batch: int = 100,
    workers: int = 4,
    now: Callable[[], datetime] = utcnow,
    lease: timedelta = DEFAULT_LEASE,
    stop: threading.Event | None = None,
) -> SendReport:
    """Deliver the latest balance of up to `batch` due fans (see the module doc), up to
    `workers` provider calls at a time (a wallet API is latency-bound; the provider must be
    thread-safe when `workers` > 1). `now` is the clock of leases and back-off (tests pass
    their own). A report with `claimed < batch` means nothing else was due when the run
    started."""
    if batch < 1 or workers < 1:
        raise ValueError("batch and workers must be at least 1")
    deadline = time.monotonic() + lease.total_seconds() / 2
    lease_until = now() + lease
    claims = _claim(engine, batch=batch, now=now(), lease_until=lease_until)
    if not claims:
        return SendReport()

    def attempt(claim: _Claim) -> SendReport:
        if (stop is not None and stop.is_set()) or time.monotonic() > deadline:
            return SendReport(released=1)
        return _deliver_one(engine, provider, claim, lease_until, now)

    if workers == 1 or len(claims) == 1:
        outcomes = [attempt(claim) for claim in claims]
    else:
        with ThreadPoolExecutor(max_workers=min(workers, len(claims)),
                                thread_name_prefix="wallet-delivery") as pool:
            outcomes = list(pool.map(attempt, claims))
    _release(engine, [c.fan.fan_pk for c, o in zip(claims, outcomes, strict=True)
                      if o.released], lease_until)
    return sum(outcomes, SendReport(claimed=len(claims)))


def pending_fans(engine: Engine, *, now: Callable[[], datetime] = utcnow) -> tuple[int, int]:
    """(fans with an undelivered balance, of which waiting for a retry or leased)."""
    pending = select(wallet_outbox.c.fan_pk).distinct().subquery()
    with engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(pending)).scalar_one()
        waiting = conn.execute(
            select(func.count()).select_from(pending)
            .join(wallet_pases, wallet_pases.c.fan_pk == pending.c.fan_pk)
            .where(wallet_pases.c.proximo_intento > now())
        ).scalar_one()
    return int(total), int(waiting)


def _claim(engine: Engine, *, batch: int, now: datetime, lease_until: datetime) -> list[_Claim]:
    with engine.begin() as conn:
        _ensure_pases(conn)
        firsts = (
            select(wallet_outbox.c.fan_pk, func.min(wallet_outbox.c.id).label("primero"))
            .group_by(wallet_outbox.c.fan_pk)
            .subquery("pendientes")
        )
        due = (
            select(wallet_pases.c.fan_pk)
            .join(firsts, firsts.c.fan_pk == wallet_pases.c.fan_pk)
            .where(wallet_pases.c.proximo_intento <= now)
            # Oldest waiting balance first.
            .order_by(firsts.c.primero)
            .limit(batch)
            .with_for_update(of=wallet_pases, skip_locked=True)
        )
        claimed = {int(fan_pk): int(intentos) for fan_pk, intentos in conn.execute(
            update(wallet_pases)
            .where(wallet_pases.c.fan_pk.in_(due.scalar_subquery()))
            .values(proximo_intento=lease_until)
            .returning(wallet_pases.c.fan_pk, wallet_pases.c.intentos)
        )}
        if not claimed:
            return []
        newer = wallet_outbox.alias("newer")
        conn.execute(
            delete(wallet_outbox)
            .where(wallet_outbox.c.fan_pk.in_(list(claimed)))
            .where(exists().where(newer.c.fan_pk == wallet_outbox.c.fan_pk,
                                  newer.c.id > wallet_outbox.c.id))
        )
        # One row per fan now, or a few when balances committed since the DELETE: the
        # highest id of each fan wins.
        latest: dict[int, _Claim] = {}
        for r in conn.execute(
            select(wallet_outbox.c.fan_pk, wallet_outbox.c.id, wallet_outbox.c.saldo,
                   fans.c.programa_id, fans.c.fan_id)
            .join(fans, fans.c.pk == wallet_outbox.c.fan_pk)
            .where(wallet_outbox.c.fan_pk.in_(list(claimed)))
            .order_by(wallet_outbox.c.id)
        ):
            latest[r.fan_pk] = _Claim(FanPass(int(r.fan_pk), r.programa_id, r.fan_id),
                                      int(r.id), int(r.saldo), claimed[r.fan_pk])
        # A claimed fan whose rows went meanwhile (another sender's late recording): give it
        # back rather than let the lease run out.
        if empty := set(claimed) - set(latest):
            conn.execute(update(wallet_pases)
                         .where(wallet_pases.c.fan_pk.in_(empty))
                         .values(proximo_intento=DUE_AT_ONCE))
    # Roughly oldest balance first.
    return sorted(latest.values(), key=lambda c: c.outbox_id)


def _ensure_pases(conn: Connection) -> None:
    """A `wallet_pases` row, due at once, for every fan with outbox rows and none yet. In
    fan order, so that concurrent senders cannot deadlock on each other's inserts."""
    missing = (
        select(wallet_outbox.c.fan_pk, literal(DUE_AT_ONCE, DateTime(timezone=True)))
        .where(~exists().where(wallet_pases.c.fan_pk == wallet_outbox.c.fan_pk))
        .group_by(wallet_outbox.c.fan_pk)
        .order_by(wallet_outbox.c.fan_pk)
    )
    conn.execute(
        insert(wallet_pases)
        .from_select(["fan_pk", "proximo_intento"], missing)
        .on_conflict_do_nothing(index_elements=["fan_pk"])
    )


def _deliver_one(engine: Engine, provider: WalletProvider, claim: _Claim,
                 lease_until: datetime, now: Callable[[], datetime]) -> SendReport:
    fan = claim.fan
    try:
        provider.deliver(fan, claim.saldo)
    except WalletDeliveryError as exc:
        if exc.permanent:
            log.warning("wallet pass of %s/%s: %s (balance %d dropped)",
                        fan.programa_id, fan.fan_id, exc, claim.saldo)
            at = now()
            _record(engine, claim, lease_until, drop_rows=True, intentos=0,
                    proximo_intento=DUE_AT_ONCE, error_en=at,
                    ultimo_error=f"permanente: {exc}"[:_ERROR_CHARS])
            return SendReport(dropped=1)
        wait = backoff(claim.intentos + 1)
        if exc.retry_after is not None:
            wait = max(wait, min(timedelta(seconds=exc.retry_after), BACKOFF_CAP))
        error = str(exc)
    except Exception as exc:  # a provider bug must not stop the other fans
        log.exception("wallet pass of %s/%s: unexpected error", fan.programa_id, fan.fan_id)
        wait = backoff(claim.intentos + 1)
        error = f"{type(exc).__name__}: {exc}"
    else:
        at = now()
        _record(engine, claim, lease_until, drop_rows=True, intentos=0,
                proximo_intento=DUE_AT_ONCE, entregado_saldo=claim.saldo, entregado_en=at)
        return SendReport(delivered=1)
    at = now()
    _record(engine, claim, lease_until, drop_rows=False,
            intentos=wallet_pases.c.intentos + 1, proximo_intento=at + wait, error_en=at,
            ultimo_error=error[:_ERROR_CHARS])
    return SendReport(retrying=1)


def _record(engine: Engine, claim: _Claim, lease_until: datetime, *, drop_rows: bool,
            **values: object) -> None:
    """Write an outcome in the fan's state row, only while our lease on it holds (its
    `proximo_intento` is still the lease we set); with `drop_rows`, also delete the fan's
    outbox rows up to the one attempted."""
    fan_pk = claim.fan.fan_pk
    with engine.begin() as conn:
        owned = conn.execute(
            update(wallet_pases)
            .where(wallet_pases.c.fan_pk == fan_pk,
                   wallet_pases.c.proximo_intento == lease_until)
            .values(**values)
        ).rowcount
        if owned and drop_rows:
            conn.execute(delete(wallet_outbox).where(wallet_outbox.c.fan_pk == fan_pk,
                                                     wallet_outbox.c.id <= claim.outbox_id))
    if not owned:
        log.warning("wallet pass of %s/%s: lease expired during delivery; left to its new "
                    "owner", claim.fan.programa_id, claim.fan.fan_id)


def _release(engine: Engine, fan_pks: list[int], lease_until: datetime) -> None:
    if not fan_pks:
        return
    with engine.begin() as conn:
        conn.execute(
            update(wallet_pases)
            .where(wallet_pases.c.fan_pk.in_(fan_pks),
                   wallet_pases.c.proximo_intento == lease_until)
            .values(proximo_intento=DUE_AT_ONCE)
        )
