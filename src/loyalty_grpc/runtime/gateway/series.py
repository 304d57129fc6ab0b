"""The gateway's own Prometheus series, on the same scrape as Envoy's (issue 24 §3).

Whoever starts Envoy (`loyalty gateway run`, `loyalty up`: runtime/gateway/envoy.py
`EnvoyProcess`) knows what Envoy cannot say about itself: how often it died and was
started again, when the one serving now started, how the last one ended, how many
`gateway reload`s it took. `GatewaySeries` holds that (thread-safe: the supervising
thread writes it, the series server's threads read it), and `SeriesServer` serves it:

- The metrics listener (runtime/gateway/side_listeners.py `metrics_listener`) forwards
  `GET /stats/prometheus` to a small HTTP server of the supervising process on the Unix
  socket `WORK_DIR/admin/stats.sock` (mode 0600, in the admin socket's folder of mode
  0700), not straight to Envoy's admin socket.
- At each scrape that server fetches Envoy's own `/stats/prometheus` (with the query
  string Prometheus sent) from the admin socket and appends these series. One target,
  one scrape: Envoy's stats and the supervisor's together, and the same names under
  `up` and `gateway run`.

Nothing of this is on a call's path: it runs only when Prometheus scrapes, in the
supervising process (which answers no call), and the metrics listener keeps its limits
(Envoy's circuit breakers on the cluster bound how many scrapes reach the server at
once: `side_listeners.series_cluster`).

Series (every one present from the first scrape):

- `loyalty_gateway_restarts_total`: Envoy started again after it died (the supervisor's
  restart policy, runtime/process/supervision.py), since the supervisor started;
- `loyalty_gateway_start_time_seconds`: Unix time at which the Envoy serving now was
  started;
- `loyalty_gateway_last_exit_code`: how the last Envoy that ended did, as the exit code
  (negative: the signal that killed it, -9 for SIGKILL; 0 before any ended), and
  `loyalty_gateway_last_exit_time_seconds` when (0: none yet). A code, not a label: one
  series whatever the cause;
- `loyalty_gateway_reloads_total`: `loyalty gateway reload`s that changed what Envoy runs
  since the gateway started (counted by the reload in the work directory,
  runtime/gateway/xds.py `WorkDir.reloads`);
- `loyalty_build_info{version}`: the release of the supervising `loyalty`.
"""

from __future__ import annotations

import contextlib
import logging
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from loyalty_grpc.runtime.gateway.admin import EnvoyAdmin
from loyalty_grpc.runtime.gateway.side_listeners import ADMIN_SOCKET_MODE, SERIES_PATH
from loyalty_grpc.runtime.metrics import BUILD_INFO, BuildInfoCollector

log = logging.getLogger(__name__)

RESTARTS: Final = "loyalty_gateway_restarts_total"
START_TIME: Final = "loyalty_gateway_start_time_seconds"
LAST_EXIT_CODE: Final = "loyalty_gateway_last_exit_code"
LAST_EXIT_TIME: Final = "loyalty_gateway_last_exit_time_seconds"
RELOADS: Final = "loyalty_gateway_reloads_total"
# Envoy's admin interface answers a stats page in milliseconds; a scrape that waits
# longer than Prometheus' default timeout (10 s) is lost anyway.
ADMIN_TIMEOUT: Final = 5.0
# A connection that sends nothing is dropped after this long (Envoy sends at once).
CONNECTION_TIMEOUT: Final = 10.0
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


class GatewaySeries(Collector):
    """What the supervisor knows of its Envoy, as Prometheus series (module doc)."""

    def __init__(self, reloads: Callable[[], int] = lambda: 0) -> None:
        self._lock = threading.Lock()
        self._reloads = reloads
        self._restarts = 0
        self._started_at = 0.0
        self._exit_code = 0
        self._exit_at = 0.0

    def started(self) -> None:
        """An Envoy process was started now."""
        with self._lock:
            self._started_at = time.time()

    def ended(self, code: int) -> None:
        """The Envoy process ended with `code` (Popen's: negative is a signal)."""
        with self._lock:
            self._exit_code = code
            self._exit_at = time.time()

    def restarted(self, _kind: str = "envoy") -> None:
        """The supervisor starts Envoy again after it died (supervision.Child's
        on_restart)."""
        with self._lock:
            self._restarts += 1

    @property
    def restarts(self) -> int:
        with self._lock:
            return self._restarts

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            restarts, started_at = self._restarts, self._started_at
            exit_code, exit_at = self._exit_code, self._exit_at
        try:
            reloads = self._reloads()
        except (OSError, ValueError):  # a scrape reports what it can
            log.warning("gateway series: the reload count could not be read", exc_info=True)
            reloads = 0
        yield CounterMetricFamily(
            RESTARTS,
            "Envoy started again by its supervisor (`loyalty gateway run` or `up`) after it died.",
            value=restarts,
        )
        yield GaugeMetricFamily(
            START_TIME, "Unix time at which the Envoy serving now was started.", value=started_at
        )
        yield GaugeMetricFamily(
            LAST_EXIT_CODE,
            "Exit code of the last Envoy that ended; negative: the signal that killed it "
            "(-9 SIGKILL); 0 before any ended.",
            value=exit_code,
        )
        yield GaugeMetricFamily(
            LAST_EXIT_TIME,
            "Unix time at which the last Envoy ended (0: none ended yet).",
            value=exit_at,
        )
        yield CounterMetricFamily(
            RELOADS,
            "`loyalty gateway reload`s that changed what Envoy runs, since the gateway started.",
            value=reloads,
        )
        yield from BuildInfoCollector().collect()  # the same series as the servers'

    def exposition(self) -> bytes:
        """These series in Prometheus' text format."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return generate_latest(registry)


class _Handler(BaseHTTPRequestHandler):
    """`GET /stats/prometheus[?query]`: Envoy's page (the query passed on) and ours;
    anything else 404. Envoy's metrics listener sends only that (its routes)."""

    server: _Server
    timeout = CONNECTION_TIMEOUT  # per connection (StreamRequestHandler)
    protocol_version = "HTTP/1.0"  # one request per connection: nothing lingers

    def do_GET(self) -> None:
        path, _, _query = self.path.partition("?")
        if path != SERIES_PATH:
            self._answer(404, b"not found\n")
            return
        try:
            status, page = self.server.admin.get(self.path)
        except OSError as exc:  # Envoy does not answer its admin socket
            self._answer(503, f"Envoy's admin interface does not answer: {exc}\n".encode())
            return
        if status != 200:
            self._answer(status, page.encode())
            return
        envoys = page.encode()
        if envoys and not envoys.endswith(b"\n"):
            envoys += b"\n"
        self._answer(200, envoys + self.server.series.exposition())

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def address_string(self) -> str:
        return "envoy"  # a Unix socket's peer has no address

    def log_message(self, format: str, *args: object) -> None:
        log.debug("series server: " + format, *args)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: Path, series: GatewaySeries, admin: EnvoyAdmin) -> None:
        self.series = series
        self.admin = admin
        super().__init__(str(path), _Handler)


class SeriesServer:
    """The HTTP server of `GatewaySeries` on a Unix socket (mode 0600), in a thread."""

    def __init__(self, path: Path, series: GatewaySeries, admin: EnvoyAdmin) -> None:
        self.path = path
        path.unlink(missing_ok=True)  # left by a supervisor that died
        # Its folder (the admin socket's, mode 0700) keeps other users out from the start;
        # the socket's own mode as the admin socket's. (No umask: it is the process's, and
        # `up` has other threads.)
        self._server = _Server(path, series, EnvoyAdmin(admin.path, timeout=ADMIN_TIMEOUT))
        path.chmod(ADMIN_SOCKET_MODE)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="gateway-series", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        with contextlib.suppress(OSError):
            self.path.unlink()


__all__ = [
    "BUILD_INFO",
    "LAST_EXIT_CODE",
    "LAST_EXIT_TIME",
    "RELOADS",
    "RESTARTS",
    "START_TIME",
    "GatewaySeries",
    "SeriesServer",
]
