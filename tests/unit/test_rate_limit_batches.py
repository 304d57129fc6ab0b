"""Calls reserved in batches (services/rate_limit.py), replayed on a simulated clock with
several processes sharing the pure model of the counters (domain/rate_limit.py) as their
database: never more than the limit in any 60 s, and few round trips for a busy key.
tests/integration/test_rate_limit.py runs the same limiter on PostgreSQL."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hypothesis import example, given, settings
from hypothesis import strategies as st

from loyalty_grpc.domain.rate_limit import Devolucion, Ventana, take
from loyalty_grpc.services.rate_limit import RateLimiter
from loyalty_grpc.store.rate_limit import Reserva
from tests.unit.test_rate_limit_window import max_in_any_window

KEY = 7


@dataclass
class Clock:
    t: float = 1000.0

    def __call__(self) -> float:
        return self.t


@dataclass
class ModelCounters:
    """The database, as the pure model: a request travels `lags[0]`, is decided on the
    database clock, which is read again `lags[1]` later for `ahora`, and the answer
    travels `lags[2]` back (all of it advancing the shared clock)."""

    clock: Clock
    lags: tuple[float, float, float] = (0.0, 0.0, 0.0)
    ventanas: dict[int, Ventana] = field(default_factory=dict)
    requests: int = 0
    decided_at: float = 0.0

    def reserve(self, clave_id: int, pedidas: int, limite: int,
                devolucion: Devolucion | None = None) -> Reserva:
        self.requests += 1
        self.clock.t += self.lags[0]
        self.decided_at = self.clock.t
        ventana, granted = take(self.ventanas.get(clave_id), math.floor(self.clock.t), limite,
                                pedidas=pedidas, devolucion=devolucion)
        self.ventanas[clave_id] = ventana
        self.clock.t += self.lags[1]
        ahora = self.clock.t
        self.clock.t += self.lags[2]
        return Reserva(ventana.segundo, ventana.cuentas, granted, ahora)

    def purge(self) -> None:
        pass


def admitted_times(calls: list[tuple[float, int]], processes: int, limit: int, max_batch: int,
                   lags: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> list[float]:
    """Replay (time, process) calls of one key; the times the admitted ones were decided
    (a spare call: when it was taken; else: when the database decided)."""
    clock = Clock()
    counters = ModelCounters(clock, lags)
    limiters = [RateLimiter(counters, limit, max_batch=max_batch, clock=clock)
                for _ in range(processes)]
    admitted = []
    for offset, process in sorted(calls):
        clock.t = max(clock.t, 1000.0 + offset)
        started, before = clock.t, counters.requests
        view = limiters[process % processes].take(KEY)
        if view.admitida:
            admitted.append(counters.decided_at if counters.requests > before else started)
        assert 0 <= view.remaining <= limit
    return sorted(admitted)


# (time, process) calls: anywhere, or a minute's worth at second 0, some just after second
# 1 begins and more just after second 61 begins: a spare call of second 0 used a moment too
# late (at 1 + f) and the calls of 61 + g (g < f) would be too many in [1 + f, 61 + f).
_anywhere = st.lists(st.tuples(st.floats(min_value=0, max_value=300, allow_nan=False),
                               st.integers(min_value=0, max_value=2)), max_size=400)
_fraction = st.sampled_from([0.0, 0.0005, 0.001, 0.01, 0.5, 0.999])
_phase = st.tuples(_fraction, st.integers(min_value=1, max_value=60))


def _minute_apart(phases: tuple[tuple[float, int], ...], processes: list[int]
                  ) -> list[tuple[float, int]]:
    return [(second + fraction, processes[i % len(processes)])
            for second, (fraction, count) in zip((0, 1, 61), phases, strict=True)
            for i in range(count)]


_minute = st.builds(_minute_apart, st.tuples(_phase, _phase, _phase),
                    st.lists(st.integers(min_value=0, max_value=2), min_size=1, max_size=5))
# Round trip legs: none, LAN-like, or slow (each one advances the shared clock).
_lag = st.sampled_from([0.0, 0.0001, 0.002]) | st.floats(min_value=0, max_value=0.05)


@settings(max_examples=300, deadline=None)
@given(calls=_anywhere, processes=st.integers(min_value=1, max_value=3),
       limit=st.integers(min_value=1, max_value=40), max_batch=st.integers(1, 16),
       lags=st.tuples(_lag, _lag, _lag))
def test_never_more_than_the_limit_in_any_60_seconds(
        calls: list[tuple[float, int]], processes: int, limit: int, max_batch: int,
        lags: tuple[float, float, float]) -> None:
    admitted = admitted_times(calls, processes, limit, max_batch, lags)
    assert max_in_any_window(admitted) <= limit


@settings(max_examples=600, deadline=None)
# The first example: 21 calls reserved in second 0 and 20 used; the spare one used at
# 1.2 if it outlived its second, then a new minute at 61.1: 41 in [1.2, 61.2).
@example(calls=[(0.5, 0)] * 20 + [(1.2, 0)] * 3 + [(61.1, 0)] * 45, processes=1, limit=40,
         max_batch=16, lags=(0, 0, 0))
@given(calls=_minute, processes=st.integers(min_value=1, max_value=3),
       limit=st.integers(min_value=1, max_value=40), max_batch=st.integers(1, 16),
       lags=st.tuples(_lag, _lag, _lag))
def test_never_more_than_the_limit_a_minute_apart(
        calls: list[tuple[float, int]], processes: int, limit: int, max_batch: int,
        lags: tuple[float, float, float]) -> None:
    admitted = admitted_times(calls, processes, limit, max_batch, lags)
    assert max_in_any_window(admitted) <= limit


@settings(max_examples=50, deadline=None)
@given(starts=st.lists(st.floats(min_value=0, max_value=120, allow_nan=False), min_size=1,
                       max_size=4))
def test_bursts_of_600_in_one_second_from_two_processes(starts: list[float]) -> None:
    calls = [(start + i / 2000, i % 2) for start in starts for i in range(900)]
    admitted = admitted_times(calls, 2, 600, 60, lags=(0.0005, 0.0001, 0.0005))
    assert max_in_any_window(admitted) <= 600


def test_a_busy_key_costs_a_few_round_trips_a_second() -> None:
    clock = Clock()
    counters = ModelCounters(clock)
    limiter = RateLimiter(counters, 1_000_000, clock=clock)
    for i in range(10_000):  # 1000 calls a second for 10 s
        clock.t = 1000.0 + i / 1000
        assert limiter.take(KEY).admitida
    # Doubling to 64 in the first second, then one batch per 64 calls.
    assert counters.requests < 10_000 / 64 + 20
    assert sum(counters.ventanas[KEY].cuentas) >= 10_000


def test_a_key_at_one_call_a_second_asks_every_time() -> None:
    clock = Clock()
    counters = ModelCounters(clock)
    limiter = RateLimiter(counters, 600, clock=clock)
    for i in range(30):
        clock.t = 1000.5 + i
        assert limiter.take(KEY).admitida
    assert counters.requests == 30
    assert sum(counters.ventanas[KEY].cuentas) == 30  # nothing reserved and left unused


def test_batches_of_one_ask_the_database_for_every_call() -> None:
    clock = Clock()
    counters = ModelCounters(clock)
    limiter = RateLimiter(counters, 600, max_batch=1, clock=clock)
    assert all(limiter.take(KEY).admitida for _ in range(50))
    assert counters.requests == 50
    assert RateLimiter(counters, 9).max_batch == 1  # a tenth of a small limit


def test_a_rejection_is_remembered_until_its_second_ends() -> None:
    clock = Clock()
    counters = ModelCounters(clock)
    limiter = RateLimiter(counters, 5, max_batch=4, clock=clock)
    views = [limiter.take(KEY) for _ in range(5)]  # batches of 1: near the limit
    assert [v.admitida for v in views] == [True] * 5
    assert [v.remaining for v in views] == [4, 3, 2, 1, 0]
    asked = counters.requests
    for _ in range(100):
        view = limiter.take(KEY)
        assert not view.admitida
        assert view.retry_after == 61
    assert counters.requests == asked + 1
    clock.t += 1
    assert not limiter.take(KEY).admitida
    assert counters.requests == asked + 2


def test_unused_calls_go_back_with_the_next_request() -> None:
    clock = Clock()
    counters = ModelCounters(clock)
    limiter = RateLimiter(counters, 600, clock=clock)
    for _ in range(40):  # batches 1, 2, 4, 8, 16, 32: 63 reserved, 40 used
        limiter.take(KEY)
    assert sum(counters.ventanas[KEY].cuentas) == 63
    view = limiter.take(KEY)  # a spare one: 22 left
    assert view.admitida
    assert view.remaining == 600 - 63 + 22
    clock.t += 1
    limiter.take(KEY)  # the next second: the 22 go back with the new request
    ventana = counters.ventanas[KEY]
    assert ventana.cuentas[-2] == 41  # second 1000: the 41 calls made in it


def test_the_reported_remaining_counts_this_process_spare_calls() -> None:
    clock = Clock()
    counters = ModelCounters(clock)
    first = RateLimiter(counters, 100, clock=clock)
    second = RateLimiter(counters, 100, clock=clock)
    for _ in range(7):  # first: batches 1, 2, 4 -> 7 reserved, all used
        first.take(KEY)
    view = second.take(KEY)
    assert view.remaining == 100 - 8
