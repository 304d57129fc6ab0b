"""The Prometheus endpoint: `GET /metrics` on its own port, served by the parent process.

- `prepare(dir)`: in the parent, before any worker starts: prometheus_client's
  multiprocess mode (PROMETHEUS_MULTIPROC_DIR, inherited by the workers), stale files of an
  earlier run removed.
- `serve_metrics(host, port, database_url)`: an HTTP server thread. Its registry holds
  the server's series (api/observability.py): aggregated from every worker's files with
  PROMETHEUS_MULTIPROC_DIR, else this process's default registry (one process, tests),
  plus gauges read from the database at scrape time (the wallet outbox backlog), which
  no worker owns. Returns the stop function (also telling the port it listens on).
- `release(dir)`: after a clean stop, the files of `prepare`'s mode removed.
- `mark_worker_dead(pid)`: after a worker exited, so its live gauges stop counting.
- `count_restart(kind)`: a child process ("worker", "envoy") was restarted after it died
  (runtime/process/supervision.py); `loyalty_process_restarts_total{process}`, 0 from the start.
- `loyalty_build_info{version}` 1 (`BuildInfoCollector`): which release answers, produced at
  scrape time by the parent (no file, no cost per call).

Every counter is on /metrics from the first scrape, at 0, with every label value the
domain knows of: the restarts here (`prepare`), the call counters when a worker builds its
server (api/observability.py `start_at_zero`). tests/e2e/test_metrics_from_zero.py checks
it for every counter and histogram registered, on a fresh `loyalty serve`.

Envoy publishes its own series on its metrics listener (LOYALTY_ENVOY_METRICS_PORT):
`GET /stats/prometheus`, taken from its admin interface, a Unix socket that only the
gateway's user can open (runtime/gateway/side_listeners.py `metrics_listener`), with the
gateway's own series (`loyalty_gateway_restarts_total`...: runtime/gateway/series.py)
appended by the process that supervises Envoy.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    multiprocess,
    start_http_server,
    values,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine, create_engine, text

import loyalty_grpc
from loyalty_grpc.store.db import sqlalchemy_url

log = logging.getLogger(__name__)

MULTIPROC_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
# A scrape must not hang on a database that does not answer (Prometheus' default scrape
# timeout is 10 s).
DB_TIMEOUT_SECONDS: Final = 3
# The /metrics endpoint's own connections (the wallet backlog's query): one, and one more
# while a second scrape overlaps.
METRICS_POOL_SIZE: Final = 1
METRICS_CONNECTIONS: Final = 2
RESTARTED_KINDS: Final = ("worker", "envoy")
RESTARTS: Final = Counter(
    "loyalty_process_restarts_total",
    "Child processes of the supervising `loyalty` process started again after they died, by kind.",
    ["process"],
)


def prepare(multiproc_dir: Path) -> None:
    """Multiprocess mode for this process and the workers it starts afterwards."""
    multiproc_dir.mkdir(parents=True, exist_ok=True)
    for stale in multiproc_dir.glob("*.db"):  # prometheus_client's files only
        stale.unlink()
    os.environ[MULTIPROC_ENV] = str(multiproc_dir.resolve())
    # prometheus_client picks its value storage when it is imported; it may have been.
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
    # Every series at 0 from the first scrape. (A labelled series takes its storage when
    # it is first labelled: here, after the storage was chosen.)
    for kind in RESTARTED_KINDS:
        RESTARTS.labels(process=kind)


def release(multiproc_dir: Path) -> None:
    """After the workers and /metrics stopped (a clean stop): remove the files `prepare`'s
    mode wrote, and the folder when nothing else is in it."""
    for used in multiproc_dir.glob("*.db"):
        used.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # absent, or holding files that are not ours
        multiproc_dir.rmdir()


def count_restart(kind: str) -> None:
    RESTARTS.labels(process=kind).inc()


def mark_worker_dead(pid: int) -> None:
    """Forget the live gauges (in flight, pool) of a worker that exited."""
    directory = os.environ.get(MULTIPROC_ENV)
    if directory:
        multiprocess.mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]


class _DefaultRegistry(Collector):
    """This process's default registry, inside another registry."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


BUILD_INFO: Final = "loyalty_build_info"


class BuildInfoCollector(Collector):
    """`loyalty_build_info{version="…"} 1`: the version of the package serving."""

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            BUILD_INFO,
            "Always 1; its version label is the loyalty_grpc release of the serving process.",
            labels=["version"],
        )
        info.add_metric([loyalty_grpc.__version__], 1)
        yield info


class OutboxCollector(Collector):
    """Wallet outbox backlog, read from the database at each scrape: bounded index reads
    whatever the backlog, exact up to 10,000 fans and an estimate beyond
    (loyalty_grpc.wallet.backlog)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "loyalty_database_up",
            "1 when the metrics endpoint could read the database at this scrape, else 0.",
        )
        fans = GaugeMetricFamily(
            "loyalty_wallet_outbox_fans",
            "Fans whose new balance "
            "waits for the wallet pass sender (exact up to 10000, "
            "an estimate beyond).",
        )
        oldest = GaugeMetricFamily(
            "loyalty_wallet_outbox_oldest_seconds",
            "Age of the oldest balance waiting for the wallet pass sender (0 when none waits).",
        )
        from loyalty_grpc.wallet.backlog import backlog

        try:
            with self._engine.connect() as conn:
                conn.execute(text(f"SET statement_timeout = {DB_TIMEOUT_SECONDS * 1000}"))
                wallet = backlog(conn)
        except Exception:  # a scrape reports the failure, it does not fail
            log.warning("metrics: the database could not be read", exc_info=True)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        fans.add_metric([], float(wallet.fans))
        oldest.add_metric([], wallet.oldest_seconds)
        yield from (up, fans, oldest)


class MetricsEndpoint:
    """A running /metrics server; call it to stop it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread, engine: Engine) -> None:
        self._server = server
        self._thread = thread
        self._engine = engine
        self._stopped = threading.Event()

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def __call__(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        self._engine.dispose()


def metrics_registry(engine: Engine) -> CollectorRegistry:
    """What /metrics shows (see the module doc)."""
    registry = CollectorRegistry(auto_describe=False)
    directory = os.environ.get(MULTIPROC_ENV)
    if directory:
        multiprocess.MultiProcessCollector(  # type: ignore[no-untyped-call]
            registry, path=directory
        )
    else:
        registry.register(_DefaultRegistry())
    registry.register(BuildInfoCollector())
    registry.register(OutboxCollector(engine))
    return registry


def serve_metrics(host: str, port: int, database_url: str) -> MetricsEndpoint:
    """Serve `GET /metrics` on host:port (0: any free port, see `.port`) in a thread."""
    engine = create_engine(
        sqlalchemy_url(database_url),
        pool_size=METRICS_POOL_SIZE,
        max_overflow=METRICS_CONNECTIONS - METRICS_POOL_SIZE,
        pool_pre_ping=True,
        connect_args={"connect_timeout": DB_TIMEOUT_SECONDS},
    )
    try:
        server, thread = start_http_server(port, addr=host, registry=metrics_registry(engine))
    except OSError as exc:
        engine.dispose()
        raise OSError(f"cannot serve metrics on {host}:{port}: {exc}") from exc
    endpoint = MetricsEndpoint(server, thread, engine)
    log.info("metrics on http://%s:%d/metrics", host, endpoint.port)
    return endpoint


__all__ = [
    "BUILD_INFO",
    "MULTIPROC_ENV",
    "RESTARTS",
    "BuildInfoCollector",
    "MetricsEndpoint",
    "OutboxCollector",
    "count_restart",
    "mark_worker_dead",
    "metrics_registry",
    "prepare",
    "release",
    "serve_metrics",
]
