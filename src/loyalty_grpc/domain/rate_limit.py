"""The per-key call limit (spec: 600 calls a minute): the window arithmetic, pure.

State of one key (`Window`): `second`, the newest whole second (database clock, epoch) a
call of the key was seen in; `counts`, SLOTS counters of granted calls, oldest first: slot j
(1-based) counts the calls of second `second - SLOTS + j`, so the last slot is `second`;
and `reservations`, RESERVATION_SLOTS counters of spare calls outstanding (below), aligned
the same way on the last RESERVATION_SLOTS seconds. (In the database: the columns
`segundo`, `cuentas` and `reservas` of `limite_llamadas`, store/rate_limit.py.)

A request for `wanted` calls at second S (never before `second`: the clock used is
max(second, now)):
  1. shift: slots of seconds before S - WINDOW_SECONDS (S - RESERVATION_SLOTS + 1 for
     `reservations`) are dropped, zeros come in;
  2. an optional settlement (a `Refund`) of an earlier batch: its granted calls never
     used are subtracted from their second's slot of `counts` (if still in the window),
     and its spare calls from their second's slot of `reservations` (if still there);
  3. used = sum of the 61 slots = granted calls in seconds S-60 .. S;
     outstanding = sum of `reservations`;
  4. granted = min(wanted, limit - used, 1 + max(0, slack_calls - outstanding)) (0 means
     rejected); the last slot of `counts` grows by that, the last of `reservations` by the
     spare calls, granted - 1.
Rejected calls are not counted, so a client that waits `retry_after` seconds gets in
(counting them would let a retry loop keep itself locked out and make Retry-After a lie).
A settlement can also come alone (`settle`: no shift, nothing granted): a process gives
back a batch that expired without a next request of its key.

A process asks for more than one call at a time (services/rate_limit.py): it uses the
spare ones for later calls of the same key, but only until the database second they are
counted in ends, and settles the batch with its next request of the key or, soon after
that second ends, alone (with every other expired batch of the process). It takes the
unused calls out of the batch before sending them back, so a returned call is never used.
So every admitted call happens within the second its slot is counted in: the property below
holds for calls as they are admitted, whichever process admitted them.

Never more permissive than `limit` in ANY 60-s interval (tests/unit/test_rate_limit_window.py
checks it over arbitrary call times, one process or several). Proof: a granted slot is
counted at second max(second, floor(now)) of its request, non-decreasing in the order the
key's row is locked, and used by a call within that second. Take any interval [a, a+60),
the calls admitted in it, and the last request R (in lock order) whose slots they used,
counted at second S <= floor(a) + 59. Every other request whose slots they used came
before R and was counted at a second in [floor(a), S] (its calls were in the interval, in
the second of their request), so within the 61 slots R summed (S-60 .. S), and still
counted there: only unused slots are ever returned. R was granted g only if that sum plus
g was at most `limit`, so the calls in the interval are at most `limit`. The price: the
window is up to 61 s instead of 60 (whole-second slots), i.e. at most one second stricter,
never looser. (A clock stepping back makes it stricter still: seconds are clamped to
`second`. `reservations` and `slack_calls` only ever lower a grant: they play no part
here.)

Never stricter than `limit - slack_calls` calls, besides the calls in flight: a call is
refused only when the calls admitted in the 61 slots are at least `limit - slack_calls`.
Proof: a request is refused (or granted less than it asked for because of the limit) when
the sum of the slots is `limit`. That sum is the calls admitted plus the calls granted and
not used yet. Every granted call beyond the first of its request (which is its own call,
in flight) is a spare call of its batch, and its batch's spare calls stay in
`reservations` until the batch is settled, when its unused ones leave `counts` too. So the
unused calls are at most `sum(reservations)`, which no grant takes above `slack_calls`. A
rejection a process remembers until its second ends (services/rate_limit.py) only sees
more calls admitted in the same window. The condition: every process settles each batch
within RESERVATION_SLOTS - 1 seconds of its second. The spare calls of a process that died
(or stalled that long) are forgotten by `reservations` while still counted in `counts` for
up to a minute: stricter by up to `slack_calls` calls meanwhile, never looser. The slack,
`slack_calls`, is by default `slack(limit)` = limit // 60 - 2: 8 for 600, so a call is
refused only once 592 calls are admitted in the window (the contract: no refusal before
the 590th call, counting the calls in flight at that instant; the 2 left are for calls
that reach different processes at the same instant).

The statement that applies this atomically in PostgreSQL is store/rate_limit.py;
tests/integration/test_rate_limit.py checks it against `take` and `settle` below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

WINDOW_SECONDS = 60
# The contract's limit: calls per API key in any WINDOW_SECONDS (the default of
# LOYALTY_RATE_LIMIT_PER_MINUTE; the catalogue's `demasiadas_llamadas` quotes it).
DEFAULT_CALLS_PER_MINUTE = 600
# Whole-second slots covering seconds S-60 .. S (see the proof above).
SLOTS = WINDOW_SECONDS + 1
# Seconds a batch's spare calls stay outstanding in `reservations` unless settled: the last
# one is the current second, so a batch not settled within 4 s after its second is
# forgotten there (a process that died; see "Never stricter" above).
RESERVATION_SLOTS = 5
POLICY_NAME = "default"


def slack(limit: int) -> int:
    """The default `slack_calls`: the most spare calls outstanding for a key over all
    processes (a sixtieth of the limit, less 2 for calls in flight at once; see the module
    doc)."""
    return max(0, limit // WINDOW_SECONDS - 2)


def _zeros(n: int) -> tuple[int, ...]:
    return (0,) * n


@dataclass(frozen=True)
class Window:
    """One key's counters (see the module docstring)."""

    second: int
    counts: tuple[int, ...]
    reservations: tuple[int, ...] = _zeros(RESERVATION_SLOTS)


def empty(second: int) -> Window:
    return Window(second, _zeros(SLOTS), _zeros(RESERVATION_SLOTS))


def _shifted(counters: tuple[int, ...], step: int) -> tuple[int, ...]:
    if step >= len(counters):
        return _zeros(len(counters))
    return counters[step:] + _zeros(step)


def shift(window: Window, second: int) -> Window:
    """The counters as seen from `second` (clamped: never before the newest second)."""
    now = max(second, window.second)
    step = now - window.second
    return Window(now, _shifted(window.counts, step), _shifted(window.reservations, step))


class LimitKey(NamedTuple):
    """A key as the limit counts its calls: its program and id (the counters' row is one of
    the program's rows, found by both: store/rate_limit.py)."""

    programa_id: str
    clave_id: int


@dataclass(frozen=True)
class Refund:
    """The settlement of a batch of second `second`: `count` of its granted calls were
    never used and are given back; `reserved`, the spare calls it was granted (granted
    beyond its first call), are no longer outstanding."""

    second: int
    count: int
    reserved: int = 0


def _minus(counters: tuple[int, ...], newest: int, second: int, n: int) -> tuple[int, ...]:
    """`n` less in the slot of `second` (never below zero), if the counters (whose last
    slot is second `newest`) still hold that second."""
    j = len(counters) - 1 - (newest - second)  # 0-based slot of that second
    if n <= 0 or not 0 <= j < len(counters):
        return counters
    return (*counters[:j], counters[j] - min(n, counters[j]), *counters[j + 1 :])


def give_back(window: Window, refund: Refund | None) -> Window:
    """Settle a batch: its unused calls leave their second's slot (if still in the
    window), its spare calls leave `reservations` (if still there). No shift: `settle`."""
    if refund is None:
        return window
    return Window(
        window.second,
        _minus(window.counts, window.second, refund.second, refund.count),
        _minus(window.reservations, window.second, refund.second, refund.reserved),
    )


settle = give_back


def take(
    window: Window | None,
    second: int,
    limit: int,
    *,
    wanted: int = 1,
    refund: Refund | None = None,
    slack_calls: int | None = None,
) -> tuple[Window, int]:
    """A request for `wanted` calls at `second`, settling `refund` first: the new
    counters and how many calls were granted (0: rejected). `slack_calls` caps the spare
    calls outstanding (default: `slack(limit)`)."""
    current = give_back(shift(window or empty(second), second), refund)
    cap = slack(limit) if slack_calls is None else slack_calls
    spare = max(0, cap - sum(current.reservations))
    granted = max(0, min(wanted, limit - sum(current.counts), 1 + spare))
    if not granted:
        return current, 0
    return Window(
        current.second,
        (*current.counts[:-1], current.counts[-1] + granted),
        (*current.reservations[:-1], current.reservations[-1] + granted - 1),
    ), granted


@dataclass(frozen=True)
class Quota:
    """What the client is told after a call: IETF RateLimit fields and Retry-After."""

    limit: int
    admitted: bool
    # Calls still allowed now (r).
    remaining: int
    # Seconds until `remaining` next grows (t); when remaining is 0, also Retry-After.
    reset: int

    @property
    def retry_after(self) -> int:
        return self.reset

    def policy_header(self) -> str:
        return policy_header(self.limit)

    def header(self) -> str:
        return f'"{POLICY_NAME}";r={self.remaining};t={self.reset}'


def policy_header(limit: int) -> str:
    return f'"{POLICY_NAME}";q={limit};w={WINDOW_SECONDS}'


def quota(counts: Sequence[int], limit: int, *, admitted: bool) -> Quota:
    """The client's view of counters just updated by a call (slots oldest first).

    Slot j (1-based) leaves the window at the start of the j-th next second, so `reset` is
    the smallest whole d >= 1 after which the slots still counted (j > d) leave room for
    one more call than now; rounding up to whole seconds keeps Retry-After safe.
    """
    used = sum(counts)
    remaining = max(0, limit - used)
    if used == 0:
        return Quota(limit, admitted, remaining, 0)
    left = used
    reset = len(counts)
    for d, count in enumerate(counts, start=1):
        left -= count
        if count and max(0, limit - left) > remaining:
            reset = d
            break
    return Quota(limit, admitted, remaining, reset)
