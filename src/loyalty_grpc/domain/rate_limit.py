"""The per-key call limit (spec: 600 calls a minute): the window arithmetic, pure.

State of one key: `segundo`, the newest whole second (database clock, epoch) a call of the
key was seen in, and `cuentas`, SLOTS counters of granted calls, oldest first: slot j
(1-based) counts the calls of second `segundo - SLOTS + j`, so the last slot is `segundo`.

A request for `pedidas` calls at second S (never before `segundo`: the clock used is
max(segundo, now)):
  1. shift: slots of seconds before S - WINDOW_SECONDS are dropped, zeros come in;
  2. an optional return (`Devolucion`) of granted calls never used, of a past second still
     in the window, is subtracted from that second's slot;
  3. used = sum of the 61 slots = granted calls in seconds S-60 .. S;
  4. granted = min(pedidas, limit - used) (0 means rejected); the last slot grows by that.
Rejected calls are not counted, so a client that waits `retry_after` seconds gets in
(counting them would let a retry loop keep itself locked out and make Retry-After a lie).

A process asks for more than one call at a time (services/rate_limit.py): it uses the
spare ones for later calls of the same key, but only until the database second they are
counted in ends, and returns the unused ones with its next request. So every admitted call
happens within the second its slot is counted in: the property below holds for calls as
they are admitted, whichever process admitted them.

Never more permissive than `limit` in ANY 60-s interval (tests/unit/test_rate_limit_window.py
checks it over arbitrary call times, one process or several). Proof: a granted slot is
counted at second max(segundo, floor(now)) of its request, non-decreasing in the order the
key's row is locked, and used by a call within that second. Take any interval [a, a+60),
the calls admitted in it, and the last request R (in lock order) whose slots they used,
counted at second S <= floor(a) + 59. Every other request whose slots they used came
before R and was counted at a second in [floor(a), S] (its calls were in the interval, in
the second of their request), so within the 61 slots R summed (S-60 .. S), and still
counted there: only unused slots are ever returned. R was granted g only if that sum plus
g was at most `limit`, so the calls in the interval are at most `limit`. The price: the
window is up to 61 s instead of 60 (whole-second slots), i.e. at most one second stricter,
never looser. (A clock stepping back makes it stricter still: seconds are clamped to
`segundo`.)

The statement that applies this atomically in PostgreSQL is store/rate_limit.py;
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


@dataclass(frozen=True)
class Devolucion:
    """Granted calls of second `segundo` that were never used, given back."""

    segundo: int
    cuantas: int


def give_back(ventana: Ventana, devolucion: Devolucion | None) -> Ventana:
    """Subtract returned calls from their second's slot (if still in the window)."""
    if devolucion is None or devolucion.cuantas <= 0:
        return ventana
    j = SLOTS - 1 - (ventana.segundo - devolucion.segundo)  # 0-based slot of that second
    if not 0 <= j < SLOTS:
        return ventana
    cuentas = list(ventana.cuentas)
    cuentas[j] -= min(devolucion.cuantas, cuentas[j])
    return Ventana(ventana.segundo, tuple(cuentas))


def take(ventana: Ventana | None, segundo: int, limit: int, *, pedidas: int = 1,
         devolucion: Devolucion | None = None) -> tuple[Ventana, int]:
    """A request for `pedidas` calls at `segundo`: the new counters and how many calls
    were granted (0: rejected)."""
    current = give_back(shift(ventana or empty(segundo), segundo), devolucion)
    granted = max(0, min(pedidas, limit - sum(current.cuentas)))
    if not granted:
        return current, 0
    return Ventana(current.segundo, (*current.cuentas[:-1], current.cuentas[-1] + granted)), granted


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
