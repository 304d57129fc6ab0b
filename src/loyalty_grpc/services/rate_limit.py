"""The per-key call limit of one server process: calls reserved from PostgreSQL in small
batches, so that a busy key costs a database round trip per batch, not per call.

The counters live in PostgreSQL (store/rate_limit.py), shared by every process and host.
A call of a key this process holds no reserved call for asks the database for a batch:
one call for itself and some spare ones, all counted at once in the database's current
second (so other processes see them as used). Later calls of the key take a spare call
without a round trip, but only until that second ends on the database clock (measured
locally from the clock reading the database returned, `db_now`, rounded towards earlier),
because a call must happen within the second it is counted in (proof in
domain/rate_limit.py).

A batch is settled once: its unused spare calls go back and its spare calls stop being
outstanding. With the key's next request in this process if that comes first (no extra
round trip), else by the settler: a thread of the process that wakes SETTLE_DELAY after a
batch's second ends and settles every expired batch of every key, one call per program
among them (store/rate_limit.py), on one connection. Under the key's lock, the
settlement is taken out of the batch before it is sent, so a returned call is never used
(and a settlement lost to a database error is never sent twice: its calls stay counted,
stricter, never looser).

The database caps the spare calls outstanding for a key over all processes at a slack,
`slack_calls` (default `slack(limit)`: limit // 60 - 2, 8 for 600), so the calls granted and
not used when a call is refused are at most that many: with 600, no call is refused before
592 calls are admitted in the window, whichever processes admitted them
(domain/rate_limit.py).

Batch size adapts to the key's traffic in this process: 1 for a key seen for the first
time or after a pause; doubled when a batch ran out within its second; else the calls the
key made in its last second. It never exceeds `max_batch` (default a tenth of the limit, at
most 64), a quarter of what the database had left, nor 1 + what the slack has left.

A rejection is remembered until the end of its second (nothing can free room sooner
except a return), so a runaway loop costs one round trip per second and process.

The RateLimit fields a call reports: `r` is what the database had left after the batch plus
this process's spare calls of the key; `t` and Retry-After are the database's answer to the
batch (at most a second old, so never shorter than the truth).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from loyalty_grpc.domain.rate_limit import SLOTS, LimitKey, Quota, Refund, quota, slack
from loyalty_grpc.store.rate_limit import Reservation

log = logging.getLogger(__name__)

PURGE_SECONDS = 300.0
MAX_BATCH = 64
# After a batch's second ends, how long the settler leaves it to the key's next request
# (a busy key's next call settles it with no extra round trip).
SETTLE_DELAY = 0.05
# How long `close` waits for a settlement in progress.
CLOSE_TIMEOUT = 5.0


def default_max_batch(limit: int) -> int:
    return max(1, min(MAX_BATCH, limit // 10))


class Counters(Protocol):
    """Where the counters live: store/rate_limit.PgCounters (tests also run the pure model
    of domain/rate_limit.py behind it, to replay many processes on a simulated clock)."""

    def reserve(
        self,
        key: LimitKey,
        wanted: int,
        limit: int,
        refund: Refund | None = None,
        *,
        slack_calls: int,
    ) -> Reservation: ...

    def settle(self, refunds: Sequence[tuple[LimitKey, Refund]]) -> None: ...

    def purge(self) -> None: ...


@dataclass
class _Batch:
    """One key's last answer from the database, as this process uses it."""

    second: int
    # Local clock time (seconds) before which `second` has surely not ended on the
    # database clock: spare calls are used only before it.
    expires: float
    wanted: int
    spare: int  # spare calls not used yet (0 after a rejection or the settlement)
    # Spare calls granted (beyond the first) and not settled yet: 0 once settled.
    reserved: int
    rejected: bool
    quota: Quota  # the database's view right after the batch
    # Calls admitted from batches counted in `second` (this one and earlier ones).
    used_in_second: int

    def view(self, limit: int) -> Quota:
        if self.rejected:
            return self.quota
        return Quota(limit, True, self.quota.remaining + self.spare, self.quota.reset)

    def settle(self) -> Refund | None:
        """Take the settlement out of the batch (its spare calls can no longer be used)."""
        if not self.reserved:
            return None
        refund = Refund(self.second, self.spare, self.reserved)
        self.spare = 0
        self.reserved = 0
        return refund


@dataclass
class _Key:
    lock: threading.Lock = field(default_factory=threading.Lock)
    batch: _Batch | None = None


class RateLimiter:
    """`limit` calls per key in any 60 s (limit >= 1), shared through PostgreSQL.

    `settler=False` runs no settler thread: the caller calls `settle_expired` (tests on a
    simulated clock). `close` settles what is left and stops the thread."""

    def __init__(
        self,
        counters: Counters,
        limit: int,
        *,
        purge_seconds: float = PURGE_SECONDS,
        max_batch: int | None = None,
        slack_calls: int | None = None,
        settler: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1:
            raise ValueError("the limit must be at least 1 (0 means: no RateLimiter)")
        self.limit = limit
        self.max_batch = max_batch if max_batch is not None else default_max_batch(limit)
        if self.max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.slack_calls = slack_calls if slack_calls is not None else slack(limit)
        if self.slack_calls < 0:
            raise ValueError("slack_calls must be at least 0")
        self._counters = counters
        self._clock = clock
        self._purge_seconds = purge_seconds
        self._next_purge = clock() + purge_seconds
        self._keys: dict[LimitKey, _Key] = {}
        self._keys_lock = threading.Lock()
        # The settler: keys whose batch has spare calls to settle -> when (local clock).
        self._settler = settler
        self._due: dict[LimitKey, float] = {}
        self._due_changed = threading.Condition()
        self._wake_at: float | None = None  # when the settler thread means to wake
        self._thread: threading.Thread | None = None
        self._closed = False
        self._settle_failed = False

    def take(self, clave: LimitKey) -> Quota:
        """Admit one call of the key if the limit has room; the client's view either way."""
        if self.max_batch == 1:  # no reservations: every call asks the database
            reservation = self._counters.reserve(clave, 1, self.limit, slack_calls=self.slack_calls)
            self._maybe_purge()
            return quota(reservation.counts, self.limit, admitted=reservation.granted == 1)
        key = self._key(clave)
        with key.lock:
            batch = key.batch
            now = self._clock()
            if batch is not None and now < batch.expires:
                if batch.spare:
                    batch.spare -= 1
                    batch.used_in_second += 1
                    return batch.view(self.limit)
                if batch.rejected:
                    return batch.quota
            key.batch = self._reserve(clave, batch, now)
            if key.batch.reserved:
                self._schedule(clave, key.batch.expires)
            return key.batch.view(self.limit)

    def _reserve(self, clave: LimitKey, batch: _Batch | None, now: float) -> _Batch:
        wanted = self._batch_size(batch, now)
        refund = batch.settle() if batch is not None else None
        sent = self._clock()
        reservation = self._counters.reserve(
            clave, wanted, self.limit, refund, slack_calls=self.slack_calls
        )
        self._maybe_purge()
        granted = reservation.granted
        before = (
            batch.used_in_second if batch is not None and batch.second == reservation.second else 0
        )
        return _Batch(
            second=reservation.second,
            expires=sent + (reservation.second + 1 - reservation.db_now),
            wanted=wanted,
            spare=max(0, granted - 1),
            reserved=max(0, granted - 1),
            rejected=granted == 0,
            quota=quota(reservation.counts, self.limit, admitted=granted > 0),
            used_in_second=before + (1 if granted else 0),
        )

    def _batch_size(self, batch: _Batch | None, now: float) -> int:
        if batch is None or batch.rejected or now >= batch.expires + 1:
            wanted = 1  # new, rejected, or after a pause
        elif now < batch.expires:
            wanted = 2 * batch.wanted  # ran out within its second
        else:
            wanted = batch.used_in_second  # the second just ended: as many as it used
        if batch is not None:
            # Near the limit, smaller batches: spare calls held here are calls another
            # process of the key is refused.
            wanted = min(wanted, batch.quota.remaining // 4)
        return max(1, min(wanted, self.max_batch, 1 + self.slack_calls))

    def _key(self, clave: LimitKey) -> _Key:
        with self._keys_lock:
            key = self._keys.get(clave)
            if key is None:
                key = self._keys[clave] = _Key()
            return key

    def _maybe_purge(self) -> None:
        """Every `purge_seconds`: drop idle keys here and their rows in the database."""
        now = self._clock()
        with self._keys_lock:
            if now < self._next_purge:
                return
            self._next_purge = now + self._purge_seconds
            idle = [
                clave
                for clave, key in self._keys.items()
                if key.batch is None or now > key.batch.expires + SLOTS
            ]
            for clave in idle:
                del self._keys[clave]
        self._counters.purge()

    # ------------------------------------------------------------ the settler

    def _schedule(self, clave: LimitKey, expires: float) -> None:
        """The key's batch has spare calls to settle once `expires` has passed (called with
        the key's lock held: lock order key -> `_due_changed`)."""
        with self._due_changed:
            self._due[clave] = expires
            if self._settler and not self._closed:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, daemon=True, name="rate-limit-settler"
                    )
                    self._thread.start()
                elif self._wake_at is None or expires + SETTLE_DELAY < self._wake_at:
                    self._due_changed.notify()

    def _run(self) -> None:
        while True:
            with self._due_changed:
                while not self._closed and not self._due:
                    self._wake_at = None
                    self._due_changed.wait()
                if self._closed:
                    return
                self._wake_at = min(self._due.values()) + SETTLE_DELAY
                wait = self._wake_at - self._clock()
                if wait > 0:
                    self._due_changed.wait(wait)
                    continue
            try:
                self.settle_expired()
            except Exception:  # never let the thread die: stricter until the next round
                log.exception("settling rate-limit batches failed")

    def settle_expired(self, *, everything: bool = False) -> int:
        """Settle, in one call per program, the batches whose second has ended (`everything`:
        every batch, for `close`); returns how many were sent."""
        now = self._clock()
        with self._due_changed:
            claves = [
                clave
                for clave, expires in self._due.items()
                if everything or expires + SETTLE_DELAY <= now
            ]
        refunds: list[tuple[LimitKey, Refund]] = []
        for clave in claves:
            with self._keys_lock:
                key = self._keys.get(clave)
            if key is None:
                with self._due_changed:
                    self._due.pop(clave, None)
                continue
            # A request holding the key's lock settles the batch itself (or is using one
            # that has not expired): look again a moment later.
            if not key.lock.acquire(blocking=everything):
                with self._due_changed:
                    self._due[clave] = now
                continue
            try:
                batch = key.batch
                with self._due_changed:
                    if batch is None or not batch.reserved:
                        self._due.pop(clave, None)
                        continue
                    if not everything and now < batch.expires:
                        self._due[clave] = batch.expires  # a newer batch
                        continue
                    self._due.pop(clave, None)
                refund = batch.settle()
                if refund is not None:
                    refunds.append((clave, refund))
            finally:
                key.lock.release()
        if refunds:
            self._send(refunds)
        return len(refunds)

    def _send(self, refunds: list[tuple[LimitKey, Refund]]) -> None:
        try:
            self._counters.settle(refunds)
        except Exception as exc:
            # Not sent again: it may have been applied. Unused calls stay counted (for up
            # to a minute) and spare ones outstanding (for a few seconds): stricter.
            if not self._settle_failed:
                log.warning(
                    "could not settle %d rate-limit batches (%s); their unused calls stay counted",
                    len(refunds),
                    type(exc).__name__,
                )
            self._settle_failed = True
        else:
            if self._settle_failed:
                log.info("settling rate-limit batches works again")
            self._settle_failed = False

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Stop the settler and settle every batch left (after the last call: a stopping
        server), unless the last settlement failed (the database is likely away: a stop
        does not wait for it again). Safe to call more than once."""
        with self._due_changed:
            self._closed = True
            self._due_changed.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)  # it may be in a statement; a daemon thread
            if thread.is_alive():
                return
        if not self._settle_failed:
            self.settle_expired(everything=True)
