"""The metrics every call updates (api/observability.py): `loyalty_requests_total`,
`loyalty_request_seconds` and `loyalty_requests_in_flight`.

In a worker process (PROMETHEUS_MULTIPROC_DIR) every update of a prometheus_client value
is a write into a memory-mapped file under one lock that every metric of the process
shares (and a getpid): five a call, and the server's threads queued for that lock
(measured: docs/performance.md). There (`batched`), each thread counts its own calls in
plain Python, without a lock, and a thread of the process adds what was counted to the
metrics every FLUSH_SECONDS and when the server stops (`flush`): the parent's /metrics is
at most that late, like the pool gauges, and a worker killed outright loses at most that
much of its counts. The in-flight gauge is then set from the calls started and finished,
at each flush (a reading, as a scrape is).

In one process (no PROMETHEUS_MULTIPROC_DIR: tests, a single in-process server) every
update goes to the metrics at once, as prometheus_client's in-memory values are cheap.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Sequence

from prometheus_client import Counter, Gauge, Histogram

log = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0


class _ThreadCounts:
    """What one thread counted since it started (only that thread writes it; `flush`
    reads it, and remembers in `flushed` what it already added)."""

    __slots__ = ("buckets", "finished", "flushed", "requests", "started", "sums")

    def __init__(self) -> None:
        self.started = 0
        self.finished = 0
        self.requests: dict[tuple[str, str], int] = {}
        self.buckets: dict[tuple[str, int], int] = {}
        self.sums: dict[str, float] = {}
        self.flushed: _ThreadCounts | None = None

    def copy(self) -> _ThreadCounts:
        """A snapshot (each dict copied in one step: the owner may be adding keys)."""
        copy = _ThreadCounts()
        copy.started, copy.finished = self.started, self.finished
        copy.requests, copy.buckets, copy.sums = (
            self.requests.copy(),
            self.buckets.copy(),
            self.sums.copy(),
        )
        return copy


class CallMetrics:
    """The three per-call metrics (module doc). `requests(method, codigo)` and
    `latency(method)` give the labelled children; `buckets`: the histogram's upper bounds
    (without +Inf); `flush_every`: seconds between flushes (batched; None: only `flush`)."""

    def __init__(
        self,
        requests: Callable[[str, str], Counter],
        latency: Callable[[str], Histogram],
        in_flight: Gauge,
        buckets: Sequence[float],
        *,
        batched: bool,
        flush_every: float | None = FLUSH_SECONDS,
    ) -> None:
        self._requests = requests
        self._latency = latency
        self._in_flight = in_flight
        self._bounds = tuple(buckets)
        self.batched = batched
        self._local = threading.local()
        self._threads: list[_ThreadCounts] = []
        self._lock = threading.Lock()  # `_threads` and flushes
        if batched and flush_every is not None:
            every(flush_every, self.flush, "call-metrics", "write the call metrics")

    def started(self) -> None:
        if not self.batched:
            self._in_flight.inc()
            return
        self._mine().started += 1

    def finished(self, method: str, codigo: str, seconds: float) -> None:
        if not self.batched:
            self._in_flight.dec()
            self._requests(method, codigo).inc()
            self._latency(method).observe(seconds)
            return
        counts = self._mine()
        key = (method, codigo)
        counts.requests[key] = counts.requests.get(key, 0) + 1
        # The histogram's bucket: the first bound >= seconds (len: +Inf), as observe() does.
        bucket = (method, bisect.bisect_left(self._bounds, seconds))
        counts.buckets[bucket] = counts.buckets.get(bucket, 0) + 1
        counts.sums[method] = counts.sums.get(method, 0.0) + seconds
        counts.finished += 1

    def _mine(self) -> _ThreadCounts:
        counts: _ThreadCounts | None = getattr(self._local, "counts", None)
        if counts is None:
            counts = self._local.counts = _ThreadCounts()
            with self._lock:
                self._threads.append(counts)
        return counts

    def flush(self) -> None:
        """Add what every thread counted since the last flush to the metrics (batched)."""
        if not self.batched:
            return
        with self._lock:
            in_flight = 0
            for counts in self._threads:
                now = counts.copy()
                before = counts.flushed or _ThreadCounts()
                self._add(now, before)
                counts.flushed = now
                in_flight += now.started - now.finished
            self._in_flight.set(in_flight)

    def _add(self, now: _ThreadCounts, before: _ThreadCounts) -> None:
        for (method, codigo), count in now.requests.items():
            added = count - before.requests.get((method, codigo), 0)
            if added:
                self._requests(method, codigo).inc(added)
        for (method, bucket), count in now.buckets.items():
            added = count - before.buckets.get((method, bucket), 0)
            if added:
                # prometheus_client 0.x's Histogram child: one value per bucket, and a sum
                # (observe() adds to both); there is no public way to add many at once.
                self._latency(method)._buckets[bucket].inc(added)
        for method, total in now.sums.items():
            added_seconds = total - before.sums.get(method, 0.0)
            if added_seconds:
                self._latency(method)._sum.inc(added_seconds)


def every(seconds: float, action: Callable[[], None], name: str, what: str) -> None:
    """Run `action` every `seconds`, forever, in a daemon thread called `name`; a failure is
    logged ("could not <what>") and the next run comes: observing must never stop."""

    def run() -> None:
        while True:
            time.sleep(seconds)
            try:
                action()
            except Exception:
                log.exception("could not %s", what)

    threading.Thread(target=run, name=name, daemon=True).start()


__all__ = ["FLUSH_SECONDS", "CallMetrics", "every"]
