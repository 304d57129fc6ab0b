"""What every rendering of the gateway is checked for before Envoy runs it (`loyalty up`,
`gateway run`/`reload`/`check`, the xDS listeners), and the rendering of trusted proxies
those checks accept.

- The gateway mark (`check_gateway_mark`): the route table of each HTTP listener sets
  `x-loyalty-gateway: 1` on every request it forwards, overwriting what a client sent,
  with the name and value of api/gateway_protocol.py. The server sends the envelope
  metadata only to such calls.
- The client address (`check_client_address`): the route table sets
  `x-loyalty-client-address` to Envoy's view of the client,
  `%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%`, overwriting what a client sent, and that
  view comes from the TCP peer alone (`use_remote_address`, no trusted hops) unless
  trusted proxies are rendered (`trust_proxies`, LOYALTY_TRUSTED_PROXIES): then, for a
  request whose TCP peer is one of them, from the last address of its `X-Forwarded-For`
  (Envoy's original-IP detection by XFF with `xff_trusted_cidrs`; Envoy refuses it with
  use_remote_address, so it is turned off, and a client's `x-request-id` is removed before
  the connection manager looks at it, so that Envoy still makes a fresh one for every
  request).
- The edge's routes (`check_edge_routes`): every route that forwards to the server is a
  binding envelope.lua's edge knows (api/edge_limits.py, scripts/gen_edge.py); a route an
  operator added that forwards elsewhere turns the transcoder and the Lua filters off
  (docs/gateway.md "Routes of your own"), or envelope.lua would answer it 404.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

from loyalty_grpc.api.gateway_protocol import (
    CLIENT_ADDRESS_KEY,
    GATEWAY_MARK_KEY,
    GATEWAY_MARK_VALUE,
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
)

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
        for manager in connection_managers(listener):
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
# path or method) are answered by envelope.lua's edge from their headers (405 for a served
# path with another method, else 404).
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
    listener = named(config["static_resources"]["listeners"], LISTENER_NAME, "listener")
    for manager in connection_managers(listener):
        lua_files = [
            http_filter["typed_config"]["default_source_code"]["filename"]
            for http_filter in manager.get("http_filters", [])
            if http_filter.get("name") == LUA_FILTER
        ]
        if not lua_files:
            raise EnvoyError(f"{CONFIG_NAME}: listener {LISTENER_NAME!r} has no Lua filter")
        known = edge_bindings(Path(beside(directory, lua_files[0])).read_text(encoding="utf-8"))
        if known is None:
            continue
        for host in manager.get("route_config", {}).get("virtual_hosts", []):
            for route in host.get("routes", []):
                if "route" not in route:
                    continue
                name = route.get("name")
                if _forwards_to_the_server(route["route"]):
                    if name != UNKNOWN_API_ROUTE and name not in known:
                        raise EnvoyError(
                            f"{CONFIG_NAME}: route {name!r} forwards to the server but is "
                            f"not a binding {Path(lua_files[0]).name} knows "
                            "(scripts/gen_edge.py writes the binding routes and the edge's "
                            "table together)"
                        )
                elif not _api_filters_off(route):
                    raise EnvoyError(
                        f"{CONFIG_NAME}: route {name!r} forwards to cluster "
                        f"{route['route'].get('cluster')!r} with the API's filters on it "
                        f"({Path(lua_files[0]).name} would answer it 404): disable the "
                        "transcoder and the Lua filters on it with typed_per_filter_config "
                        '(docs/gateway.md "Routes of your own")'
                    )


def _forwards_to_the_server(action: dict[str, Any]) -> bool:
    """Whether a route's action may send calls to the API's cluster (a cluster chosen at
    run time, by a header or a plugin, may)."""
    if "cluster" in action:
        return bool(action["cluster"] == CLUSTER_NAME)
    weighted = action.get("weighted_clusters")
    if weighted is not None:
        return any(item.get("name") == CLUSTER_NAME for item in weighted.get("clusters", []))
    return True


def _api_filters_off(route: dict[str, Any]) -> bool:
    """Whether a route turns off the transcoder and the Lua filters (one entry for both
    of them: they share their name)."""
    config = route.get("typed_per_filter_config", {})
    return all(
        config.get(name, {}).get("disabled") is True for name in (LUA_FILTER, TRANSCODER_FILTER)
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
        for manager in connection_managers(listener):
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
    for manager in connection_managers(listener):
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


__all__ = [
    "CLIENT_ADDRESS_SOURCE",
    "EARLY_HEADER_MUTATION",
    "EARLY_HEADER_MUTATION_TYPE",
    "UNKNOWN_API_ROUTE",
    "XFF_DETECTION",
    "XFF_DETECTION_TYPE",
    "check_client_address",
    "check_edge_routes",
    "check_gateway_mark",
    "client_address_header",
    "edge_bindings",
    "gateway_mark",
    "trust_proxies",
    "xff_detection",
]
