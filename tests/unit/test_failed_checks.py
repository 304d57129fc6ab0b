"""The limit on failed key checks per client address (api/failed_checks.py) on a fake
clock: `limit` checks per window, then Blocked with the seconds left; a check that turns
out valid given back; windows per address; a bounded table whose overflow is shared; many
threads at once never get more than the limit."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from loyalty_grpc.api.failed_checks import (
    OVERFLOW,
    WINDOW_SECONDS,
    Blocked,
    FailedChecks,
    Reservation,
)


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


def _use_up(checks: FailedChecks, address: str) -> None:
    for _ in range(checks.limit):
        assert isinstance(checks.reserve(address), Reservation)


def test_the_limit_then_blocked_until_the_window_passes() -> None:
    clock = Clock()
    checks = FailedChecks(5, clock=clock)
    _use_up(checks, "192.0.2.1")
    assert checks.reserve("192.0.2.1") == Blocked(60)
    clock.now += 0.5
    assert checks.reserve("192.0.2.1") == Blocked(60)  # whole seconds, rounded up
    clock.now += 59.0
    assert checks.reserve("192.0.2.1") == Blocked(1)
    clock.now += 0.5  # the window (from the first failed check) passed
    assert isinstance(checks.reserve("192.0.2.1"), Reservation)


def test_the_window_starts_at_the_first_failed_check() -> None:
    clock = Clock()
    checks = FailedChecks(3, clock=clock)
    checks.reserve("192.0.2.1")
    clock.now += 50
    checks.reserve("192.0.2.1")
    checks.reserve("192.0.2.1")
    assert checks.reserve("192.0.2.1") == Blocked(10)
    clock.now += 10
    _use_up(checks, "192.0.2.1")  # a new window: `limit` again
    assert checks.reserve("192.0.2.1") == Blocked(int(WINDOW_SECONDS))


def test_a_check_whose_key_works_does_not_count() -> None:
    checks = FailedChecks(2, clock=Clock())
    for _ in range(10):
        reservation = checks.reserve("192.0.2.1")
        assert isinstance(reservation, Reservation)
        checks.succeeded(reservation)
    _use_up(checks, "192.0.2.1")
    assert isinstance(checks.reserve("192.0.2.1"), Blocked)


def test_a_reservation_of_a_window_that_passed_is_not_given_back_to_the_next() -> None:
    clock = Clock()
    checks = FailedChecks(2, clock=clock)
    old = checks.reserve("192.0.2.1")
    assert isinstance(old, Reservation)
    clock.now += WINDOW_SECONDS
    _use_up(checks, "192.0.2.1")
    checks.succeeded(old)  # late: its window is gone
    assert isinstance(checks.reserve("192.0.2.1"), Blocked)


def test_a_failure_without_reservation_counts() -> None:
    checks = FailedChecks(2, clock=Clock())
    checks.failed("192.0.2.1")
    checks.failed("192.0.2.1")
    assert isinstance(checks.reserve("192.0.2.1"), Blocked)


def test_addresses_are_counted_apart() -> None:
    checks = FailedChecks(3, clock=Clock())
    _use_up(checks, "192.0.2.1")
    assert isinstance(checks.reserve("192.0.2.1"), Blocked)
    _use_up(checks, "192.0.2.2")
    _use_up(checks, "2001:db8::/64")


def test_a_full_table_drops_passed_windows_first_then_shares_one_overflow() -> None:
    clock = Clock()
    checks = FailedChecks(2, max_addresses=4, clock=clock)
    for n in range(4):
        checks.reserve(f"192.0.2.{n}")
        clock.now += 1
    assert checks.tracked() == 4
    # Table full, every window running: new addresses share the overflow window.
    assert checks.reserve("198.51.100.1") == Reservation(OVERFLOW, clock.now + WINDOW_SECONDS)
    assert isinstance(checks.reserve("198.51.100.2"), Reservation)
    assert isinstance(checks.reserve("198.51.100.3"), Blocked)
    assert isinstance(checks.reserve("198.51.100.1"), Blocked)
    # A tracked address keeps its own window.
    assert isinstance(checks.reserve("192.0.2.3"), Reservation)
    # Once the oldest windows pass, new addresses get their own again.
    clock.now = 1000.0 + WINDOW_SECONDS + 0.5  # 192.0.2.0's window passed
    assert checks.reserve("198.51.100.9") == Reservation("198.51.100.9", clock.now + 60)
    assert checks.tracked() == 4


def test_the_table_stays_bounded_under_many_addresses() -> None:
    clock = Clock()
    checks = FailedChecks(60, max_addresses=1000, clock=clock)
    for n in range(50_000):
        checks.reserve(f"10.{n >> 16}.{(n >> 8) & 255}.{n & 255}")
        clock.now += 0.01  # 500 s in all: windows pass and are dropped
    assert checks.tracked() <= 1000


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="0: no limiter"):
        FailedChecks(0)


def test_many_threads_never_get_more_than_the_limit() -> None:
    """32 threads reserving for 4 addresses at once (some checks succeeding and given
    back): per address, the checks that stayed counted are exactly the limit."""
    limit = 50
    checks = FailedChecks(limit, clock=Clock())
    counted: dict[str, int] = {f"192.0.2.{n}": 0 for n in range(4)}
    lock = threading.Lock()
    start = threading.Barrier(32)

    def hammer(n: int) -> None:
        address = f"192.0.2.{n % 4}"
        start.wait()
        for i in range(500):
            verdict = checks.reserve(address)
            if isinstance(verdict, Blocked):
                continue
            if i % 3 == 0:
                checks.succeeded(verdict)  # a key that works
            else:
                with lock:
                    counted[address] += 1

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counted == dict.fromkeys(counted, limit)
