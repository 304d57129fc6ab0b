"""The limit on failed key checks per client address (LOYALTY_FAILED_KEY_CHECKS_PER_MINUTE,
default 60): a client that sends keys that do not work gets at most that many checks per
window of WINDOW_SECONDS; beyond that, until its window passes, a call whose key is not
known to work (api/key_cache.py) is refused without a lookup (429 demasiadas_llamadas,
api/authentication.py). So random keys cannot reach the database faster than the limit
per address, and cannot be guessed faster either.

What counts: every key check that fails, whether the database said so or the cache
remembered it (a terminal looping on a revoked key is throttled too); well-formed keys
only (a missing, malformed or wrongly shaped key is refused without any lookup). A
check counts *before* its lookup (`reserve`) and is given back when the key works
(`succeeded`), so concurrent calls from one address cannot run more lookups than the
limit between them.

The window: fixed, WINDOW_SECONDS from the address's first failed check (not aligned on
the clock). Within one window at most `limit` checks fail; a window's end and the next
one's start can both be used, so in the worst case 2 × limit fail within 60 s, and on
average at most `limit` a minute. A sliding count would need every failure's time per
address; this needs two numbers.

Where the counts live: in each server process, in memory. With W worker processes on
the port the database sees at most W × limit lookups of failed checks per address and
window, which at the default (60) is a few a second: nothing a shared count (a round
trip per check, the very cost this saves) would need to save. The gateway also
remembers the verdict (api/gateway_protocol.py ADDRESS_BLOCKED_KEY) and refuses from the
headers.

Bounded: at most MAX_ADDRESSES addresses are tracked (~150 bytes each). A new address
beyond that first drops windows that passed (the oldest first); when every tracked window
is still running, the new address shares one OVERFLOW window with every other address
not tracked: together they get `limit` failed checks per window. So an attacker with more
addresses than the table holds cannot run more lookups than the table's addresses plus
one × limit per window, and what it costs a legitimate client is a 429 for a key that has
never worked from this process (a key that worked passes, api/key_cache.py).

Thread-safe: one lock around each step (a few dictionary operations); only calls whose
key is not known to work get here.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

WINDOW_SECONDS = 60.0
DEFAULT_LIMIT = 60
MAX_ADDRESSES = 10_000
# The name of the window shared by addresses that found the table full (no address's).
OVERFLOW = "*"


@dataclass(frozen=True)
class Reservation:
    """A check counted in advance: the window it was counted in."""

    address: str
    ends: float


@dataclass(frozen=True)
class Blocked:
    """The address used up its failed checks: whole seconds until its window passes."""

    seconds: int


class _Window:
    __slots__ = ("ends", "failed")

    def __init__(self, ends: float) -> None:
        self.ends = ends
        self.failed = 0


class FailedChecks:
    def __init__(
        self,
        limit: int = DEFAULT_LIMIT,
        *,
        window: float = WINDOW_SECONDS,
        max_addresses: int = MAX_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1:
            raise ValueError("the limit of failed key checks must be 1 or more (0: no limiter)")
        self.limit = limit
        self.window = window
        self._max = max(1, max_addresses)
        self._clock = clock
        self._lock = threading.Lock()
        # Oldest window first: windows all last as long, so also the first to pass.
        self._windows: OrderedDict[str, _Window] = OrderedDict()
        # Shared by the addresses that found the table full of running windows.
        self._overflow: _Window | None = None

    def reserve(self, address: str) -> Reservation | Blocked:
        """Before looking up a key not known to work: count the check as failed now
        (give it back with `succeeded`), or Blocked when the address has no checks left."""
        now = self._clock()
        with self._lock:
            name, window = self._current(address, now)
            if window.failed >= self.limit:
                return Blocked(max(1, math.ceil(window.ends - now)))
            window.failed += 1
            return Reservation(name, window.ends)

    def succeeded(self, reservation: Reservation) -> None:
        """The key of a reserved check works: the check does not count (unless its window
        already passed)."""
        with self._lock:
            window = (
                self._overflow
                if reservation.address == OVERFLOW
                else self._windows.get(reservation.address)
            )
            if window is not None and window.ends == reservation.ends and window.failed > 0:
                window.failed -= 1

    def failed(self, address: str) -> None:
        """Count a failed check that was not reserved (a key known to work that no longer
        does)."""
        now = self._clock()
        with self._lock:
            self._current(address, now)[1].failed += 1

    def tracked(self) -> int:
        """Addresses with a window (not counting the overflow window)."""
        with self._lock:
            return len(self._windows)

    def _current(self, address: str, now: float) -> tuple[str, _Window]:
        """The address's running window (a new one when there is none or it passed, or the
        overflow window when the table is full of running ones)."""
        window = self._windows.get(address)
        if window is not None and window.ends > now:
            return address, window
        if window is not None:
            del self._windows[address]
        self._drop_passed(now)
        if len(self._windows) < self._max:
            window = _Window(now + self.window)
            self._windows[address] = window
            return address, window
        if self._overflow is None or self._overflow.ends <= now:
            self._overflow = _Window(now + self.window)
        return OVERFLOW, self._overflow

    def _drop_passed(self, now: float) -> None:
        while self._windows:
            oldest = next(iter(self._windows.values()))
            if oldest.ends > now:
                return
            self._windows.popitem(last=False)


__all__ = [
    "DEFAULT_LIMIT",
    "MAX_ADDRESSES",
    "OVERFLOW",
    "WINDOW_SECONDS",
    "Blocked",
    "FailedChecks",
    "Reservation",
]
