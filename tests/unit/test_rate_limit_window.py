"""The call-limit window (domain/rate_limit.py): never more permissive than the limit in
any 60 s, over arbitrary call times; Retry-After and the RateLimit fields tell the truth;
the spare calls outstanding are capped by the slack and settled."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from loyalty_grpc.domain.rate_limit import (
    RESERVATION_SLOTS,
    SLOTS,
    Refund,
    Window,
    give_back,
    policy_header,
    quota,
    settle,
    shift,
    slack,
    take,
)
from tests.support import max_in_any_window

# Call times in seconds (fractions included), unsorted: sorted before replaying.
_times = st.lists(st.floats(min_value=0, max_value=400, allow_nan=False), max_size=400)


def replay(times: list[float], limit: int) -> list[tuple[float, bool, Window]]:
    window: Window | None = None
    out = []
    for t in sorted(times):
        window, granted = take(window, math.floor(t), limit)
        assert granted in (0, 1)
        out.append((t, granted == 1, window))
    return out


@settings(max_examples=300, deadline=None)
@given(times=_times, limit=st.integers(min_value=1, max_value=30))
def test_never_more_than_the_limit_in_any_60_seconds(times: list[float], limit: int) -> None:
    admitted = [t for t, ok, _ in replay(times, limit) if ok]
    assert max_in_any_window(admitted) <= limit


@st.composite
def _busy_times(draw: st.DrawFn) -> list[float]:
    """600 to 1500 calls in 200 s, some in bursts within one second. Drawn from a seeded
    generator rather than as a list of 600+ floats: Hypothesis's `large_base_example`
    health check (6.170) refuses strategies whose smallest example is that large."""
    rng = draw(st.randoms(use_true_random=False))
    n = draw(st.integers(min_value=600, max_value=1500))
    bursts = [rng.uniform(0, 200) for _ in range(draw(st.integers(0, 5)))]
    return [
        rng.choice(bursts) + rng.random() if bursts and rng.random() < 0.5 else rng.uniform(0, 200)
        for _ in range(n)
    ]


@settings(max_examples=100, deadline=None)
@given(times=_busy_times())
def test_never_more_than_600_in_any_60_seconds(times: list[float]) -> None:
    admitted = [t for t, ok, _ in replay(times, 600) if ok]
    assert max_in_any_window(admitted) <= 600


@settings(max_examples=300, deadline=None)
@given(times=_times, limit=st.integers(min_value=1, max_value=30))
def test_retry_after_is_enough(times: list[float], limit: int) -> None:
    """After a rejection, the next call made Retry-After seconds later is admitted."""
    for t, ok, window in replay(times, limit):
        view = quota(window.counts, limit, admitted=ok)
        if not ok:
            assert view.remaining == 0
            assert 1 <= view.retry_after <= SLOTS
            _, again = take(window, math.floor(t + view.retry_after), limit)
            assert again == 1


def test_a_rejected_call_is_not_counted() -> None:
    window, granted = take(None, 100, 1)
    assert granted == 1
    rejected, granted = take(window, 130, 1)
    assert granted == 0
    assert sum(rejected.counts) == 1


def test_full_window_then_free_after_61_seconds() -> None:
    window = None
    for _ in range(3):
        window, granted = take(window, 10, 3)
        assert granted == 1
    assert window is not None
    assert take(window, 70, 3)[1] == 0  # 60 s later: still counted (61-s window)
    assert take(window, 71, 3)[1] == 1


def test_quota_headers() -> None:
    window = None
    for second in (0, 0, 5):
        window, _ = take(window, second, 10)
    assert window is not None
    view = quota(window.counts, 10, admitted=True)
    # 7 left; the two calls of second 0 leave the window at second 61, i.e. in 56 s.
    assert (view.remaining, view.reset) == (7, 56)
    assert view.header() == '"default";r=7;t=56'
    assert view.policy_header() == policy_header(10) == '"default";q=10;w=60'


def test_quota_over_a_lowered_limit() -> None:
    """Counters from a higher limit: Retry-After waits until there is room again."""
    counts = (0,) * (SLOTS - 3) + (2, 2, 2)
    view = quota(counts, 3, admitted=False)
    assert (view.remaining, view.retry_after) == (0, SLOTS - 1)


def test_shift_never_goes_back_in_time() -> None:
    window = Window(50, (0,) * (SLOTS - 1) + (4,))
    assert shift(window, 40) == window
    assert shift(window, 50 + SLOTS) == Window(50 + SLOTS, (0,) * SLOTS)
    assert shift(window, 51).counts[-2:] == (4, 0)


def test_a_batch_is_granted_up_to_what_is_left() -> None:
    window, granted = take(None, 10, 10, wanted=4, slack_calls=100)
    assert (granted, window.counts[-1]) == (4, 4)
    window, granted = take(window, 10, 10, wanted=8, slack_calls=100)
    assert (granted, window.counts[-1]) == (6, 10)
    window, granted = take(window, 11, 10, wanted=8, slack_calls=100)
    assert (granted, sum(window.counts)) == (0, 10)


def test_unused_calls_given_back_free_their_second() -> None:
    window, _ = take(None, 10, 10, wanted=10, slack_calls=9)
    # 3 of second 10 never used, returned at second 12: room for 3 more.
    window, granted = take(window, 12, 10, wanted=5, refund=Refund(10, 3, 9), slack_calls=9)
    assert granted == 3
    assert window.counts[-3:] == (7, 0, 3)
    assert window.reservations[-3:] == (0, 0, 2)


def test_the_slack() -> None:
    assert [slack(limit) for limit in (1, 60, 179, 180, 600, 6000)] == [0, 0, 0, 1, 8, 98]


def test_spare_calls_outstanding_never_pass_the_slack() -> None:
    window, granted = take(None, 10, 600, wanted=20)  # slack(600) = 8
    assert (granted, window.reservations[-1]) == (9, 8)
    window, granted = take(window, 10, 600, wanted=20)
    assert (granted, window.reservations[-1]) == (1, 8)  # only its own call
    window, granted = take(window, 11, 600, wanted=20, refund=Refund(10, 5, 8))
    assert granted == 9
    assert window.reservations[-2:] == (0, 8)
    assert window.counts[-2:] == (10 - 5, 9)


def test_outstanding_spare_calls_are_forgotten_after_a_few_seconds() -> None:
    """A process that died never settles: its spare calls stop being outstanding after
    RESERVATION_SLOTS seconds but stay counted for the minute (stricter, never looser)."""
    window, _ = take(None, 10, 600, wanted=9)
    window, granted = take(window, 10 + RESERVATION_SLOTS - 1, 600, wanted=9)
    assert granted == 1
    window, granted = take(window, 10 + RESERVATION_SLOTS, 600, wanted=9)
    assert granted == 9
    assert sum(window.counts) == 9 + 1 + 9
    # A late settlement of the forgotten batch gives its calls back, and touches no
    # other second's outstanding count.
    settled = settle(window, Refund(10, 8, 8))
    assert sum(settled.counts) == 1 + 1 + 9
    assert settled.reservations == window.reservations


def test_a_settlement_alone_does_not_move_the_window() -> None:
    window, _ = take(None, 10, 600, wanted=9)
    settled = settle(window, Refund(10, 3, 8))
    assert settled.second == 10
    assert settled.counts[-1] == 6
    assert settled.reservations == (0,) * RESERVATION_SLOTS


def test_a_return_never_goes_below_zero_nor_outside_the_window() -> None:
    window, _ = take(None, 10, 10, wanted=2)
    assert give_back(window, Refund(10, 5)).counts[-1] == 0
    assert give_back(window, Refund(10 - SLOTS, 5)) == window  # left the window
    assert give_back(window, Refund(10, 0)) == window
    assert give_back(window, None) == window
