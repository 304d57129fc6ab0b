"""Calls reserved in batches (services/rate_limit.py), replayed on a simulated clock with
several processes sharing the pure model of the counters (domain/rate_limit.py) as their
database: never more than the limit in any 60 s, whenever batches are settled; never a
refusal before `limit - slack_calls` calls are admitted when every process settles its
expired batches; few round trips for a busy key. The settler thread on the real clock.
tests/integration/test_rate_limit.py runs the same limiter on PostgreSQL."""

from __future__ import annotations

import bisect
import math
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loyalty_grpc.domain.rate_limit import (
    WINDOW_SECONDS,
    LimitKey,
    Refund,
    Window,
    settle,
    take,
)
from loyalty_grpc.services.rate_limit import SETTLE_DELAY, RateLimiter
from loyalty_grpc.store.rate_limit import Reservation
from tests.support import max_in_any_window

KEY = LimitKey("p", 7)


@dataclass
class Clock:
    t: float = 1000.0

    def __call__(self) -> float:
        return self.t


@dataclass
class ModelCounters:
    """The database, as the pure model: a request travels `lags[0]`, is decided on the
    database clock, which is read again `lags[1]` later for `db_now`, and the answer
    travels `lags[2]` back (all of it advancing the shared clock)."""

    clock: Clock
    lags: tuple[float, float, float] = (0.0, 0.0, 0.0)
    windows: dict[LimitKey, Window] = field(default_factory=dict)
    requests: int = 0
    decided_at: float = 0.0

    settlements: int = 0

    def reserve(
        self,
        clave_id: LimitKey,
        wanted: int,
        limit: int,
        refund: Refund | None = None,
        *,
        slack_calls: int,
    ) -> Reservation:
        self.requests += 1
        self.clock.t += self.lags[0]
        self.decided_at = self.clock.t
        window, granted = take(
            self.windows.get(clave_id),
            math.floor(self.clock.t),
            limit,
            wanted=wanted,
            refund=refund,
            slack_calls=slack_calls,
        )
        self.windows[clave_id] = window
        self.clock.t += self.lags[1]
        db_now = self.clock.t
        self.clock.t += self.lags[2]
        return Reservation(window.second, window.counts, granted, db_now, window.reservations)

    def settle(self, refunds: Sequence[tuple[LimitKey, Refund]]) -> None:
        self.settlements += 1
        for clave_id, refund in refunds:
            if clave_id in self.windows:
                self.windows[clave_id] = settle(self.windows[clave_id], refund)

    def purge(self) -> None:
        pass


def limiter(counters: ModelCounters, limit: int, **kwargs: int) -> RateLimiter:
    """A process's limiter on the simulated clock (no settler thread: `settle_expired`)."""
    return RateLimiter(counters, limit, settler=False, clock=counters.clock, **kwargs)


@dataclass
class Call:
    at: float  # when it was decided: a spare call when taken, else by the database
    admitted: bool


def replay(
    calls: list[tuple[float, int]],
    processes: int,
    limit: int,
    max_batch: int,
    lags: tuple[float, float, float] = (0.0, 0.0, 0.0),
    *,
    slack_calls: int | None = None,
    settling: float = 0.0,
    seed: int = 0,
) -> list[Call]:
    """Replay (time, process) calls of one key. Before each call, each process settles its
    expired batches with probability `settling` (1: a settler always on time)."""
    clock = Clock()
    counters = ModelCounters(clock, lags)
    extra = {} if slack_calls is None else {"slack_calls": slack_calls}
    limiters = [limiter(counters, limit, max_batch=max_batch, **extra) for _ in range(processes)]
    rng = random.Random(seed)
    out = []
    for offset, process in sorted(calls):
        clock.t = max(clock.t, 1000.0 + offset)
        for other in limiters:
            if settling >= 1 or rng.random() < settling:
                other.settle_expired()
        started, before = clock.t, counters.requests
        view = limiters[process % processes].take(KEY)
        out.append(
            Call(counters.decided_at if counters.requests > before else started, view.admitted)
        )
        assert 0 <= view.remaining <= limit
    return out


def admitted_times(
    calls: list[tuple[float, int]],
    processes: int,
    limit: int,
    max_batch: int,
    lags: tuple[float, float, float] = (0.0, 0.0, 0.0),
    *,
    settling: float = 0.0,
    seed: int = 0,
) -> list[float]:
    """The times the admitted calls were decided (a spare call: when it was taken; else:
    when the database decided)."""
    return sorted(
        c.at
        for c in replay(calls, processes, limit, max_batch, lags, settling=settling, seed=seed)
        if c.admitted
    )


def first_refusals_are_late(calls: list[Call], limit: int, slack_calls: int) -> None:
    """Every refusal comes with at least `limit - slack_calls` calls admitted in the 61 whole
    seconds the database counts (domain/rate_limit.py: "Never stricter")."""
    admitted: list[int] = []  # the seconds of the calls admitted so far (non-decreasing)
    for i, call in enumerate(calls):
        second = math.floor(call.at)
        if call.admitted:
            admitted.append(second)
            continue
        in_window = len(admitted) - bisect.bisect_left(admitted, second - WINDOW_SECONDS)
        assert in_window >= limit - slack_calls, (i, in_window, len(admitted))


# (time, process) calls: anywhere, or a minute's worth at second 0, some just after second
# 1 begins and more just after second 61 begins: a spare call of second 0 used a moment too
# late (at 1 + f) and the calls of 61 + g (g < f) would be too many in [1 + f, 61 + f).
_anywhere = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=300, allow_nan=False),
        st.integers(min_value=0, max_value=2),
    ),
    max_size=400,
)
_fraction = st.sampled_from([0.0, 0.0005, 0.001, 0.01, 0.5, 0.999])
_phase = st.tuples(_fraction, st.integers(min_value=1, max_value=60))


def _minute_apart(
    phases: tuple[tuple[float, int], ...], processes: list[int]
) -> list[tuple[float, int]]:
    return [
        (second + fraction, processes[i % len(processes)])
        for second, (fraction, count) in zip((0, 1, 61), phases, strict=True)
        for i in range(count)
    ]


_minute = st.builds(
    _minute_apart,
    st.tuples(_phase, _phase, _phase),
    st.lists(st.integers(min_value=0, max_value=2), min_size=1, max_size=5),
)
# Round trip legs: none, LAN-like, or slow (each one advances the shared clock).
_lag = st.sampled_from([0.0, 0.0001, 0.002]) | st.floats(min_value=0, max_value=0.05)


# How often the processes settle expired batches: never (only with the key's next
# request), now and then, or always on time.
_settling = st.sampled_from([0.0, 0.3, 1.0])


@settings(max_examples=300, deadline=None)
@given(
    calls=_anywhere,
    processes=st.integers(min_value=1, max_value=3),
    limit=st.integers(min_value=1, max_value=40),
    max_batch=st.integers(1, 16),
    lags=st.tuples(_lag, _lag, _lag),
    settling=_settling,
    seed=st.integers(0, 9),
)
def test_never_more_than_the_limit_in_any_60_seconds(
    calls: list[tuple[float, int]],
    processes: int,
    limit: int,
    max_batch: int,
    lags: tuple[float, float, float],
    settling: float,
    seed: int,
) -> None:
    admitted = admitted_times(
        calls, processes, limit, max_batch, lags, settling=settling, seed=seed
    )
    assert max_in_any_window(admitted) <= limit


@settings(max_examples=600, deadline=None)
# The first example: 21 calls reserved in second 0 and 20 used; the spare one used at
# 1.2 if it outlived its second, then a new minute at 61.1: 41 in [1.2, 61.2).
@example(
    calls=[(0.5, 0)] * 20 + [(1.2, 0)] * 3 + [(61.1, 0)] * 45,
    processes=1,
    limit=40,
    max_batch=16,
    lags=(0, 0, 0),
    settling=0.0,
    seed=0,
)
@given(
    calls=_minute,
    processes=st.integers(min_value=1, max_value=3),
    limit=st.integers(min_value=1, max_value=40),
    max_batch=st.integers(1, 16),
    lags=st.tuples(_lag, _lag, _lag),
    settling=_settling,
    seed=st.integers(0, 9),
)
def test_never_more_than_the_limit_a_minute_apart(
    calls: list[tuple[float, int]],
    processes: int,
    limit: int,
    max_batch: int,
    lags: tuple[float, float, float],
    settling: float,
    seed: int,
) -> None:
    admitted = admitted_times(
        calls, processes, limit, max_batch, lags, settling=settling, seed=seed
    )
    assert max_in_any_window(admitted) <= limit


def _in_runs(runs: list[tuple[int, int, int]]) -> list[tuple[float, int]]:
    """Runs of calls of one process each, 1 ms apart, a run starting `gap` seconds after
    the previous one ended (0: right after): a process reserves, then another takes the
    rest of the second, or a process goes quiet holding spare calls."""
    calls, t = [], 0.0
    for gap, process, count in runs:
        t += gap
        for _ in range(count):
            calls.append((t, process))
            t += 0.001
    return calls


_runs = st.builds(
    _in_runs,
    st.lists(
        st.tuples(st.sampled_from([0, 0, 0, 1, 2, 6]), st.integers(0, 3), st.integers(1, 40)),
        max_size=12,
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    calls=_runs | _anywhere | _minute,
    processes=st.integers(min_value=1, max_value=4),
    limit=st.integers(min_value=1, max_value=60) | st.integers(min_value=100, max_value=250),
    max_batch=st.integers(1, 16),
    slack_calls=st.integers(0, 10),
    lags=st.tuples(_lag, _lag, _lag),
)
# Process 0 goes quiet holding 10 spare calls; 6 s later (its outstanding count forgotten,
# had it not settled) process 2 reserves 10 more and process 1 takes the rest: without
# the settlement, 20 unused calls when process 1 is refused.
@example(
    calls=_in_runs([(0, 0, 16), (6, 2, 16), (0, 1, 300)]),
    processes=3,
    limit=200,
    max_batch=16,
    slack_calls=10,
    lags=(0, 0, 0),
)
def test_no_refusal_before_the_limit_less_the_slack(
    calls: list[tuple[float, int]],
    processes: int,
    limit: int,
    max_batch: int,
    slack_calls: int,
    lags: tuple[float, float, float],
) -> None:
    """Processes that settle their expired batches on time: a call is refused only when
    at least `limit - slack_calls` calls are admitted in the database's window."""
    replayed = replay(
        calls, processes, limit, max_batch, lags, slack_calls=slack_calls, settling=1.0
    )
    first_refusals_are_late(replayed, limit, slack_calls)
    assert max_in_any_window(sorted(c.at for c in replayed if c.admitted)) <= limit


@settings(max_examples=50, deadline=None)
@given(
    starts=st.lists(st.floats(min_value=0, max_value=120, allow_nan=False), min_size=1, max_size=4)
)
def test_bursts_of_600_in_one_second_from_two_processes(starts: list[float]) -> None:
    calls = [(start + i / 2000, i % 2) for start in starts for i in range(900)]
    replayed = replay(calls, 2, 600, 60, lags=(0.0005, 0.0001, 0.0005), settling=1.0)
    assert max_in_any_window(sorted(c.at for c in replayed if c.admitted)) <= 600
    first_refusals_are_late(replayed, 600, 8)


@settings(max_examples=30, deadline=None)
@given(
    processes=st.integers(2, 4),
    burst=st.integers(1, 400),
    pattern=st.lists(st.integers(0, 3), min_size=1, max_size=8),
)
def test_a_burst_then_one_at_a_time_is_refused_at_592_at_the_earliest(
    processes: int, burst: int, pattern: list[int]
) -> None:
    """The issue's experiment on the model: a burst on every process, then calls one at
    a time spread over them; the first refusal after 592 admitted, then exactly 600."""
    calls = [(i / 5000, i % processes) for i in range(burst)]
    calls += [(1.0 + i / 1000, pattern[i % len(pattern)]) for i in range(700)]
    calls += [(3.0 + i / 100, pattern[i % len(pattern)]) for i in range(50)]
    replayed = replay(calls, processes, 600, 60, lags=(0.0002, 0.0001, 0.0002), settling=1.0)
    outcomes = [c.admitted for c in replayed]
    assert outcomes.index(False) >= 592
    assert sum(outcomes) == 600
    assert not any(outcomes[-10:])


def test_spare_calls_of_a_process_gone_quiet_come_back_to_the_other() -> None:
    """Process 0 reserves batches and goes quiet holding spare calls; once settled, the
    key's calls on process 1 get the whole limit."""
    clock = Clock()
    counters = ModelCounters(clock)
    first, second = limiter(counters, 600), limiter(counters, 600)
    for i in range(100):
        clock.t = 1000.0 + i / 1000
        assert first.take(KEY).admitted
    held = sum(counters.windows[KEY].reservations)
    assert 0 < held <= 8
    assert sum(counters.windows[KEY].counts) > 100  # unused spare calls counted
    clock.t = 1001.0 + SETTLE_DELAY
    assert first.settle_expired() == 1
    assert sum(counters.windows[KEY].reservations) == 0
    assert sum(counters.windows[KEY].counts) == 100
    assert first.settle_expired() == 0  # settled once
    clock.t = 1003.0
    admitted = 0
    for i in range(600):
        clock.t = 1003.0 + i / 1000
        admitted += second.take(KEY).admitted
    assert admitted == 500
    assert not second.take(KEY).admitted


def test_without_settling_a_quiet_process_would_hold_its_calls() -> None:
    """The same without the settler: the spare calls stay counted (stricter, never looser)
    until the key's next request in that process."""
    clock = Clock()
    counters = ModelCounters(clock)
    first, second = limiter(counters, 600), limiter(counters, 600)
    for i in range(100):
        clock.t = 1000.0 + i / 1000
        first.take(KEY)
    unused = sum(counters.windows[KEY].counts) - 100
    assert unused > 0
    admitted = 0
    for i in range(600):
        clock.t = 1010.0 + i / 1000
        admitted += second.take(KEY).admitted
    assert admitted == 500 - unused


def test_a_batch_in_use_is_not_settled_before_its_second_ends() -> None:
    clock = Clock()
    counters = ModelCounters(clock)
    process = limiter(counters, 600)
    for _ in range(4):  # batches 1, 2, 4: 3 spare ones left
        process.take(KEY)
    assert process.settle_expired() == 0
    clock.t += 0.999
    assert process.settle_expired() == 0
    assert process.take(KEY).admitted  # a spare one, no round trip
    assert counters.requests == 3
    clock.t += 0.001 + SETTLE_DELAY
    assert process.settle_expired() == 1
    assert counters.windows[KEY].reservations[-1] == 0
    assert counters.windows[KEY].counts[-1] == 5


def test_the_next_request_settles_a_batch_the_settler_has_not() -> None:
    clock = Clock()
    counters = ModelCounters(clock)
    process = limiter(counters, 600)
    for _ in range(4):
        process.take(KEY)
    clock.t += 1.01
    process.take(KEY)  # settles the batch of second 1000 with its request (a batch of 4)
    assert counters.settlements == 0
    assert counters.windows[KEY].counts[-2:] == (4, 4)
    assert counters.windows[KEY].reservations[-2:] == (0, 3)
    assert process.settle_expired() == 0  # the new batch is in use
    clock.t += 1 + SETTLE_DELAY
    assert process.settle_expired() == 1
    assert counters.windows[KEY].counts[-2:] == (4, 1)  # 3 unused calls back
    assert counters.windows[KEY].reservations[-1] == 0
    assert counters.settlements == 1


def test_close_settles_every_batch_left() -> None:
    clock = Clock()
    counters = ModelCounters(clock)
    process = limiter(counters, 600)
    for _ in range(4):
        process.take(KEY)
    process.close()
    assert counters.windows[KEY].reservations == (0,) * 5
    assert sum(counters.windows[KEY].counts) == 4


@dataclass
class FailingCounters(ModelCounters):
    """The model, with the next `settle` / `reserve` failing (a database error) when
    asked to; records the settlements each request carried."""

    fail_settle: bool = False
    fail_reserve: bool = False
    carried: list[Refund | None] = field(default_factory=list)

    def reserve(
        self,
        clave_id: LimitKey,
        wanted: int,
        limit: int,
        refund: Refund | None = None,
        *,
        slack_calls: int,
    ) -> Reservation:
        self.carried.append(refund)
        if self.fail_reserve:
            self.fail_reserve = False
            raise ConnectionError("the database went away")
        return super().reserve(clave_id, wanted, limit, refund, slack_calls=slack_calls)

    def settle(self, refunds: Sequence[tuple[LimitKey, Refund]]) -> None:
        if self.fail_settle:
            self.fail_settle = False
            raise ConnectionError("the database went away")
        super().settle(refunds)


def test_a_failed_settlement_is_never_sent_again(caplog: pytest.LogCaptureFixture) -> None:
    """It may have been applied before the error: sent again, it would give back calls
    that were used. Its calls stay counted instead (stricter)."""
    clock = Clock()
    counters = FailingCounters(clock)
    process = limiter(counters, 600)
    for _ in range(4):  # 3 spare calls left
        process.take(KEY)
    clock.t += 1 + SETTLE_DELAY
    counters.fail_settle = True
    assert process.settle_expired() == 1
    assert "could not settle 1 rate-limit batches (ConnectionError)" in caplog.text
    assert process.settle_expired() == 0
    assert sum(counters.windows[KEY].counts) == 7  # the 3 unused still counted
    process.close()  # the last settlement failed: close sends nothing
    assert counters.settlements == 0


def test_a_failed_request_never_sends_its_settlement_again() -> None:
    clock = Clock()
    counters = FailingCounters(clock)
    process = limiter(counters, 600)
    for _ in range(4):
        process.take(KEY)
    clock.t += 1.01
    counters.fail_reserve = True
    with pytest.raises(ConnectionError):
        process.take(KEY)
    assert counters.carried[-1] == Refund(1000, 3, 3)  # the batch of 4, 1 used
    assert process.take(KEY).admitted
    assert counters.carried[-1] is None
    assert process.settle_expired() == 0


class WallCounters:
    """The pure model on the real clock (time.time()), for the settler thread."""

    def __init__(self) -> None:
        self.window: Window | None = None
        self.settled = threading.Event()
        self.lock = threading.Lock()

    def reserve(
        self,
        clave_id: LimitKey,
        wanted: int,
        limit: int,
        refund: Refund | None = None,
        *,
        slack_calls: int,
    ) -> Reservation:
        with self.lock:
            now = time.time()
            self.window, granted = take(
                self.window,
                math.floor(now),
                limit,
                wanted=wanted,
                refund=refund,
                slack_calls=slack_calls,
            )
            return Reservation(
                self.window.second, self.window.counts, granted, now, self.window.reservations
            )

    def settle(self, refunds: Sequence[tuple[LimitKey, Refund]]) -> None:
        with self.lock:
            for _, refund in refunds:
                assert self.window is not None
                self.window = settle(self.window, refund)
        self.settled.set()

    def purge(self) -> None:
        pass


def test_the_settler_thread_settles_after_the_second_ends() -> None:
    counters = WallCounters()
    process = RateLimiter(counters, 600)
    try:
        for _ in range(4):  # 1 + 2 + 4 reserved: 3 spare ones left
            assert process.take(KEY).admitted
        assert counters.window is not None
        assert sum(counters.window.reservations) > 0
        assert counters.settled.wait(3)
        with counters.lock:
            assert sum(counters.window.reservations) == 0
            assert sum(counters.window.counts) == 4
        # A later batch wakes the settler again.
        counters.settled.clear()
        for _ in range(4):
            assert process.take(KEY).admitted
        assert counters.settled.wait(3)
        with counters.lock:
            assert sum(counters.window.counts) == 8
    finally:
        process.close()


def test_a_busy_key_costs_a_few_round_trips_a_second() -> None:
    clock = Clock()
    counters = ModelCounters(clock)
    process = limiter(counters, 1_000_000)
    for i in range(10_000):  # 1000 calls a second for 10 s
        clock.t = 1000.0 + i / 1000
        assert process.take(KEY).admitted
    # Doubling to 64 in the first second, then one batch per 64 calls.
    assert counters.requests < 10_000 / 64 + 20
    assert sum(counters.windows[KEY].counts) >= 10_000


def test_a_key_at_one_call_a_second_asks_every_time() -> None:
    clock = Clock()
    counters = ModelCounters(clock)
    process = limiter(counters, 600)
    for i in range(30):
        clock.t = 1000.5 + i
        assert process.take(KEY).admitted
    assert counters.requests == 30
    assert sum(counters.windows[KEY].counts) == 30  # nothing reserved and left unused


def test_batches_of_one_ask_the_database_for_every_call() -> None:
    clock = Clock()
    counters = ModelCounters(clock)
    process = limiter(counters, 600, max_batch=1)
    assert all(process.take(KEY).admitted for _ in range(50))
    assert counters.requests == 50
    assert limiter(counters, 9).max_batch == 1  # a tenth of a small limit


def test_a_rejection_is_remembered_until_its_second_ends() -> None:
    clock = Clock()
    counters = ModelCounters(clock)
    process = limiter(counters, 5, max_batch=4)
    views = [process.take(KEY) for _ in range(5)]  # batches of 1: near the limit
    assert [v.admitted for v in views] == [True] * 5
    assert [v.remaining for v in views] == [4, 3, 2, 1, 0]
    asked = counters.requests
    for _ in range(100):
        view = process.take(KEY)
        assert not view.admitted
        assert view.retry_after == 61
    assert counters.requests == asked + 1
    clock.t += 1
    assert not process.take(KEY).admitted
    assert counters.requests == asked + 2


def test_unused_calls_go_back_with_the_next_request() -> None:
    clock = Clock()
    counters = ModelCounters(clock)
    process = limiter(counters, 600, slack_calls=40)
    for _ in range(40):  # batches 1, 2, 4, 8, 16, 32: 63 reserved, 40 used
        process.take(KEY)
    assert sum(counters.windows[KEY].counts) == 63
    assert counters.windows[KEY].reservations[-1] == 31
    view = process.take(KEY)  # a spare one: 22 left
    assert view.admitted
    assert view.remaining == 600 - 63 + 22
    clock.t += 1
    process.take(KEY)  # the next second: the 22 go back with the new request
    window = counters.windows[KEY]
    assert window.counts[-2] == 41  # second 1000: the 41 calls made in it
    assert window.reservations[-2:] == (0, 40)  # settled; the new batch: 41 calls


def test_the_slack_caps_the_spare_calls_of_all_processes() -> None:
    """limit 600: at most 8 spare calls outstanding, whichever process holds them."""
    clock = Clock()
    counters = ModelCounters(clock)
    first, second = limiter(counters, 600), limiter(counters, 600)
    for _ in range(20):
        first.take(KEY)
        second.take(KEY)
        assert sum(counters.windows[KEY].reservations) <= 8
    assert counters.windows[KEY].reservations[-1] == 8
    assert first.slack_calls == 8
    assert limiter(counters, 100).slack_calls == 0  # 100 // 60 - 2 < 0: no spare calls


def test_the_reported_remaining_counts_this_process_spare_calls() -> None:
    clock = Clock()
    counters = ModelCounters(clock)
    first = limiter(counters, 100, slack_calls=10)
    second = limiter(counters, 100, slack_calls=10)
    for _ in range(7):  # first: batches 1, 2, 4 -> 7 reserved, all used
        first.take(KEY)
    view = second.take(KEY)
    assert view.remaining == 100 - 8
