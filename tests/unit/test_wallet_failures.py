"""The log of a failure that repeats (wallet/failures.py) and the sender's back-off after
failed runs (wallet/sender.py), on a simulated clock."""

from __future__ import annotations

import logging

import pytest

from loyalty_grpc.wallet.failures import FailureLog
from loyalty_grpc.wallet.sender import MAX_ERROR_WAIT, error_wait


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_one_traceback_then_a_line_a_minute_then_one_recovery_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    failures = FailureLog(
        logging.getLogger("t.failures"), recovered="it works again", every=60, clock=clock
    )
    caplog.set_level(logging.INFO, logger="t.failures")
    for second in range(122):  # a failure every second for two minutes
        clock.now = float(second)
        failures.failed(ConnectionRefusedError("[Errno 111] Connection refused"), "it failed")
    clock.now = 130.0
    failures.succeeded()
    failures.succeeded()  # no streak: nothing
    lines = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert lines == [
        ("ERROR", "it failed: ConnectionRefusedError: [Errno 111] Connection refused", True),
        (
            "ERROR",
            "it failed again (61 in a row, 59 not logged): ConnectionRefusedError: "
            "[Errno 111] Connection refused",
            False,
        ),
        (
            "ERROR",
            "it failed again (121 in a row, 59 not logged): ConnectionRefusedError: "
            "[Errno 111] Connection refused",
            False,
        ),
        ("WARNING", "it works again after 122 failures in 130 s", False),
    ]
    assert failures.failures == 0
    caplog.clear()
    failures.failed(TimeoutError("timed out"), "it failed", "; next try in 2s")
    # A new streak: its first failure has its traceback again.
    assert [(r.getMessage(), r.exc_info is not None) for r in caplog.records] == [
        ("it failed: TimeoutError: timed out; next try in 2s", True)
    ]


def test_every_zero_logs_each_failure_in_one_line(caplog: pytest.LogCaptureFixture) -> None:
    failures = FailureLog(logging.getLogger("t.each"), recovered="ok", clock=Clock())
    caplog.set_level(logging.INFO, logger="t.each")
    for _ in range(3):
        failures.failed(RuntimeError("first line\nsecond line"), "run failed")
    assert [(r.getMessage(), r.exc_info is not None) for r in caplog.records] == [
        ("run failed: RuntimeError: first line", True),
        ("run failed again (2 in a row): RuntimeError: first line", False),
        ("run failed again (3 in a row): RuntimeError: first line", False),
    ]


def test_the_back_off_after_failed_runs_is_exponential_and_bounded() -> None:
    assert [error_wait(1.0, n) for n in range(1, 9)] == [2, 4, 8, 16, 32, 60, 60, 60]
    assert error_wait(0.05, 1) == pytest.approx(0.1)
    assert error_wait(1.0, 10_000) == MAX_ERROR_WAIT  # no overflow however long it lasts
    # An interval longer than the cap: a failed run never makes the sender try sooner.
    assert error_wait(120.0, 1) == 120.0
