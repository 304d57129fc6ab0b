"""The background sender a server process runs: `outbox.drain` every `interval` seconds,
or at once when woken. A run that fails (database unreachable, a table missing) is tried
again after a bounded exponential back-off, logged without a traceback after the first
(wallet/failures.py); the sender recovers by itself when the cause goes away."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime

from loyalty_grpc.store.db import Database
from loyalty_grpc.wallet.failures import FailureLog
from loyalty_grpc.wallet.outbox import drain, utcnow
from loyalty_grpc.wallet.providers import SupportsClose, WalletProvider

log = logging.getLogger(__name__)

# Longest pause after consecutive failed runs (database unreachable, a table missing…).
MAX_ERROR_WAIT = 60.0


def error_wait(interval: float, failures: int) -> float:
    """The pause after `failures` failed runs in a row: 2, 4, 8 … times the interval, at
    most MAX_ERROR_WAIT (or the interval, when that is longer)."""
    return min(interval * 2.0 ** min(failures, 64), max(MAX_ERROR_WAIT, interval))


class WalletSender:
    """Usage: `sender.start()` after the server starts, `sender.stop()` before it stops.
    `wake()` asks for a run now (e.g. right after a sale commits); otherwise it runs every
    `interval` seconds. Each wake-up runs `send_pending` until a run finds nothing more to
    do at once (`outbox.drain`). Several processes may each run one: they never deliver
    the same fan at once."""

    def __init__(
        self,
        engine: Database,
        provider: WalletProvider,
        *,
        interval: float = 1.0,
        batch: int = 100,
        workers: int = 4,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.engine = engine
        self.provider = provider
        self.interval = interval
        self.batch = batch
        self.workers = workers
        self._now = now
        self._wakeup = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # A run that keeps failing logs one traceback, then a line per retry (at most one a
        # minute once the back-off is at its longest), and one line when it works again.
        self._failures = FailureLog(log, recovered="wallet sender runs again")

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("WalletSender already started")
        self._thread = threading.Thread(target=self._run, name="wallet-sender", daemon=True)
        self._thread.start()
        log.info(
            "wallet sender started (%s provider, every %gs)",
            getattr(self.provider, "name", type(self.provider).__name__),
            self.interval,
        )

    def wake(self) -> None:
        self._wakeup.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the delivery in progress (the rest of the batch is handed back), then
        close the provider. Safe to call more than once."""
        self._stopping.set()
        self._wakeup.set()
        thread, self._thread = self._thread, None
        if thread is None:
            return
        thread.join(timeout)
        if thread.is_alive():
            log.warning("wallet sender did not stop within %gs", timeout)
        if isinstance(self.provider, SupportsClose):
            self.provider.close()
        log.info("wallet sender stopped")

    def _run(self) -> None:
        while not self._stopping.is_set():
            # Cleared before the run: a wake() during the run triggers another one.
            self._wakeup.clear()
            try:
                self._drain()
                self._failures.succeeded()
                wait = self.interval
            except Exception as exc:
                wait = error_wait(self.interval, self._failures.failures + 1)
                self._failures.failed(exc, "wallet sender run failed", f"; next try in {wait:g}s")
            self._wakeup.wait(wait)

    def _drain(self) -> None:
        total = drain(
            self.engine,
            self.provider,
            batch=self.batch,
            workers=self.workers,
            now=self._now,
            stop=self._stopping,
        )
        if total.claimed:
            level = logging.WARNING if total.retrying or total.dropped else logging.DEBUG
            log.log(level, "wallet: %s (%d outbox rows folded in)", total.summary(), total.ingested)
