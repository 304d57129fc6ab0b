"""The gateway's listeners besides the API's, each forwarding nothing to the server:

- with TLS, when asked for (LOYALTY_HTTP_REDIRECT_PORT), a plain-HTTP listener that
  answers GET/HEAD with a 301 to https on the configured public host (LOYALTY_PUBLIC_HOST,
  never the request's Host) and anything else with a 400 envelope (`redirect_listener`);
- Envoy's admin interface is never a TCP port: it has no authentication and can stop
  Envoy (`POST /quitquitquit`), change its log levels and dump its configuration. It is a
  Unix socket (`admin_pipe`: mode 0600, in a folder of mode 0700 that runtime/gateway/xds.py
  `WorkDir.admin_dir` creates), so only the service's user (and root) can open it;
  `loyalty status`, `gateway reload` and the supervisor talk to it there
  (runtime/gateway/admin.py). Prometheus gets Envoy's series from a listener of their own
  when asked for (`metrics_listener`, LOYALTY_ENVOY_METRICS_PORT, loopback by default):
  it answers `GET /ready` from the admin socket through the cluster `envoy_admin`
  (`admin_cluster`), `GET /stats/prometheus` from the supervising `loyalty` process's
  series server (runtime/gateway/series.py: Envoy's series fetched from the admin socket,
  the gateway's own appended) through the cluster `gateway_series` (`series_cluster`), and
  404 to everything else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loyalty_grpc.domain.errors import CATALOGO, CodigoError
from loyalty_grpc.runtime.gateway.checks import client_address_header, gateway_mark
from loyalty_grpc.runtime.gateway.shape import HCM_FILTER, EnvoyError
from loyalty_grpc.runtime.settings import split_public_host

REDIRECT_LISTENER_NAME = "pos_http_redirect"
REDIRECT_DETAIL = "Esta API solo se sirve por HTTPS; use https://."
HTTPS_DEFAULT_PORT = 443
# The admin interface's Unix socket: readable and writable by Envoy's user only. The
# kernel's limit on a socket path (sun_path, 108 bytes with its final NUL).
ADMIN_SOCKET_MODE = 0o600
MAX_SOCKET_PATH = 107
# Envoy's Prometheus series, without the rest of the admin interface.
METRICS_LISTENER_NAME = "envoy_metrics"
ADMIN_CLUSTER_NAME = "envoy_admin"
# The paths the metrics listener forwards (GET only); everything else is a 404. The
# series page goes to the supervisor's series server, /ready to the admin socket.
SERIES_PATH = "/stats/prometheus"
READY_PATH = "/ready"
METRICS_PATHS = (SERIES_PATH, READY_PATH)
SERIES_CLUSTER_NAME = "gateway_series"
# The series server's Unix socket, beside the admin socket (same folder, same mode); not
# longer than the admin socket's name, so that it fits wherever that one does.
SERIES_SOCKET_NAME = "stats.sock"
# Scrapes the series server may hold at once (Envoy answers 503 beyond): Prometheus
# scrapes one at a time; a few more for an operator's curl.
SERIES_MAX_REQUESTS = 4


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


def series_socket(admin_socket: Path) -> Path:
    """The series server's socket for the admin socket `admin_socket` (its folder)."""
    return admin_socket.with_name(SERIES_SOCKET_NAME)


def series_cluster(admin_socket: Path) -> dict[str, Any]:
    """The cluster through which the metrics listener reaches the supervisor's series
    server (`series_socket`), at most SERIES_MAX_REQUESTS scrapes at once."""
    limits = {
        "max_connections": SERIES_MAX_REQUESTS,
        "max_pending_requests": SERIES_MAX_REQUESTS,
        "max_requests": SERIES_MAX_REQUESTS,
        "max_retries": 0,
    }
    return {
        "name": SERIES_CLUSTER_NAME,
        "type": "STATIC",
        "connect_timeout": "1s",
        "circuit_breakers": {"thresholds": [limits]},
        "load_assignment": {
            "cluster_name": SERIES_CLUSTER_NAME,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {"endpoint": {"address": admin_pipe(series_socket(admin_socket))}}
                    ]
                }
            ],
        },
    }


def metrics_listener(address: str, port: int) -> dict[str, Any]:
    """A plain-HTTP listener for Prometheus: `GET /stats/prometheus` (Envoy's series and
    the gateway's own) goes to the supervisor's series server (`series_cluster`), `GET
    /ready` (200 once Envoy is LIVE, for health checks) to the admin socket, any
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
            "route": {"cluster": cluster, "timeout": "10s"},
        }
        for path, cluster in ((SERIES_PATH, SERIES_CLUSTER_NAME), (READY_PATH, ADMIN_CLUSTER_NAME))
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


__all__ = [
    "ADMIN_CLUSTER_NAME",
    "ADMIN_SOCKET_MODE",
    "HTTPS_DEFAULT_PORT",
    "MAX_SOCKET_PATH",
    "METRICS_LISTENER_NAME",
    "METRICS_PATHS",
    "READY_PATH",
    "REDIRECT_DETAIL",
    "REDIRECT_LISTENER_NAME",
    "SERIES_CLUSTER_NAME",
    "SERIES_MAX_REQUESTS",
    "SERIES_PATH",
    "SERIES_SOCKET_NAME",
    "admin_cluster",
    "admin_pipe",
    "metrics_listener",
    "plain_http_envelope",
    "redirect_listener",
    "series_cluster",
    "series_socket",
]
