"""The per-key call limit (spec: 600 calls a minute): the window arithmetic, pure.

State of one key: `segundo`, the newest whole second (database clock, epoch) a call of the
key was seen in, and `cuentas`, SLOTS counters of admitted calls, oldest first: slot j
(1-based) counts the calls of second `segundo - SLOTS + j`, so the last slot is `segundo`.

A call at second S (never before `segundo`: the clock used is max(segundo, now)):
  1. shift: slots of seconds before S - WINDOW_SECONDS are dropped, zeros come in;
  2. used = sum of the 61 slots = admitted calls in seconds S-60 .. S;
  3. admitted iff used < limit; only then the last slot grows by one.
Rejected calls are not counted, so a client that waits `retry_after` seconds gets in
(counting them would let a retry loop keep itself locked out and make Retry-After a lie).

Never more permissive than `limit` in ANY 60-s interval (tests/unit/test_rate_limit_window.py
checks it over arbitrary call times). Proof: the recorded second of a call is
max(segundo, floor(now)), non-decreasing in the order the key's row is locked. Take any
interval [a, a+60) and the last call c admitted in it, at time t, recorded at second
S >= floor(t). Every other call admitted in [a, t] was admitted before c and recorded at a
second in [floor(a), S]; floor(a) >= floor(t - 60) >= S - 60 when the clock does not step
back (S = floor(t)), so it is in one of the 61 slots c's decision summed. c was admitted,
so those calls number < limit, and with c at most `limit`. The price: the window is up to
61 s instead of 60 (whole-second slots), i.e. at most one second stricter, never looser.
(A clock stepping back makes it stricter still: seconds are clamped to `segundo`.)

The statement that applies this atomically in PostgreSQL is services/rate_limit.py;
tests/integration/test_rate_limit.py checks it against `take` below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

WINDOW_SECONDS = 60
# Whole-second slots covering seconds S-60 .. S (see the proof above).
SLOTS = WINDOW_SECONDS + 1
POLICY_NAME = "default"


@dataclass(frozen=True)
class Ventana:
    """One key's counters (see the module docstring)."""

    segundo: int
    cuentas: tuple[int, ...]


def empty(segundo: int) -> Ventana:
    return Ventana(segundo, (0,) * SLOTS)


def shift(ventana: Ventana, segundo: int) -> Ventana:
    """The counters as seen from `segundo` (clamped: never before the newest second)."""
    now = max(segundo, ventana.segundo)
    step = now - ventana.segundo
    if step >= SLOTS:
        return empty(now)
    return Ventana(now, ventana.cuentas[step:] + (0,) * step)


def take(ventana: Ventana | None, segundo: int, limit: int) -> tuple[Ventana, bool]:
    """One call at `segundo`: the new counters and whether it is admitted."""
    current = shift(ventana or empty(segundo), segundo)
    if sum(current.cuentas) >= limit:
        return current, False
    return Ventana(current.segundo, (*current.cuentas[:-1], current.cuentas[-1] + 1)), True


@dataclass(frozen=True)
class Cuota:
    """What the client is told after a call: IETF RateLimit fields and Retry-After."""

    limit: int
    admitida: bool
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


def cuota(cuentas: Sequence[int], limit: int, *, admitida: bool) -> Cuota:
    """The client's view of counters just updated by a call (slots oldest first).

    Slot j (1-based) leaves the window at the start of the j-th next second, so `reset` is
    the smallest whole d >= 1 after which the slots still counted (j > d) leave room for
    one more call than now; rounding up to whole seconds keeps Retry-After safe.
    """
    used = sum(cuentas)
    remaining = max(0, limit - used)
    if used == 0:
        return Cuota(limit, admitida, remaining, 0)
    left = used
    reset = len(cuentas)
    for d, count in enumerate(cuentas, start=1):
        left -= count
        if count and max(0, limit - left) > remaining:
            reset = d
            break
    return Cuota(limit, admitida, remaining, reset)
