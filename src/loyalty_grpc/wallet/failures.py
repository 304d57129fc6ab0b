"""Log lines for a failure that repeats until its cause goes away (the database down, a
table missing): the wallet sender retries on its own, so the log must say what is wrong
once in full and then stay short.

A streak of failures logs its first one at ERROR with the traceback, the next ones at
ERROR as one line without it (at most one per `every` seconds; those in between are
counted in the next line), and its end (`succeeded()`) once at WARNING. Thread-safe."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from loyalty_grpc.store.db_errors import one_line


class FailureLog:
    def __init__(
        self,
        logger: logging.Logger,
        *,
        recovered: str,
        every: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`recovered`: the WARNING line that ends a streak, followed by " after N
        failures in S s"."""
        self._log = logger
        self._recovered = recovered
        self._every = every
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0  # in the current streak
        self._unlogged = 0  # since the last line
        self._started = 0.0
        self._last_line = 0.0

    @property
    def failures(self) -> int:
        """Failures in the current streak (0: none)."""
        return self._failures

    def failed(self, error: BaseException, what: str, detail: str = "") -> None:
        """Log `what` failed because of `error` (one line: `store.db_errors.one_line`), then
        `detail` (e.g. "; next try in 4s")."""
        with self._lock:
            now = self._clock()
            self._failures += 1
            if self._failures == 1:
                self._started = now
                self._last_line = now
                self._unlogged = 0
                self._log.error("%s: %s%s", what, one_line(error), detail, exc_info=error)
                return
            if now - self._last_line < self._every:
                self._unlogged += 1
                return
            unlogged, self._unlogged, self._last_line = self._unlogged, 0, now
            self._log.error(
                "%s again (%d in a row%s): %s%s",
                what,
                self._failures,
                f", {unlogged} not logged" if unlogged else "",
                one_line(error),
                detail,
            )

    def succeeded(self) -> None:
        """End the streak, if any (one WARNING line)."""
        with self._lock:
            if not self._failures:
                return
            failures, self._failures = self._failures, 0
            self._log.warning(
                "%s after %d failures in %.0f s",
                self._recovered,
                failures,
                self._clock() - self._started,
            )
