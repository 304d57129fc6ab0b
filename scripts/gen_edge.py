"""Generate what the gateway decides from a request's headers, from the single sources:
the binding routes of gateway/envoy.yaml and the EDGE block of gateway/envelope.lua.

    python scripts/gen_edge.py           # rewrite both blocks in place
    python scripts/gen_edge.py --check   # exit 1 when a block is stale

- envoy.yaml, between `# BEGIN BINDINGS` and `# END BINDINGS`: one route per HTTP binding
  of loyalty.v1.PosService (proto/), named "METHOD /path", matching its method and its
  path as it reaches the route table after normalize_path and merge_slashes (the path, or
  the path and one trailing slash: what the transcoder maps to that method), in the order
  of edge_limits.BINDINGS (the hot calls first: routes are tried in turn), forwarding
  with the route action of the hand-written `/api/v1/` route, and giving the buffer filter
  the binding's limit (src/loyalty_grpc/api/edge_limits.py).
- envelope.lua, between `-- BEGIN EDGE` and `-- END EDGE`: each binding's body limit and
  the detalle of a body over it, each path served with its methods (a 405's `Allow` and
  detalle; the 404's hint picks among them), the detalle of headers over Envoy's limit,
  the bounds of a detalle and of a client value in it (src/loyalty_grpc/domain/detalle.py),
  the texts of the credential's refusals (src/loyalty_grpc/domain/keys.py), the shape of
  a well-formed key, the sizes of the gateway's tables and the name of the server's
  address verdict (src/loyalty_grpc/api/gateway_protocol.py).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from gen_request_check import bindings, check_limits, lua_text
from generated_block import main_many, replace_block

from loyalty_grpc.api import edge_limits
from loyalty_grpc.api.gateway_protocol import ADDRESS_BLOCKED_KEY
from loyalty_grpc.domain import detalle, keys

ROOT = Path(__file__).resolve().parents[1]
ENVOY = ROOT / "gateway" / "envoy.yaml"
LUA = ROOT / "gateway" / "envelope.lua"
SOURCES = "the proto and src/loyalty_grpc/api/edge_limits.py"
YAML_BEGIN = "# BEGIN BINDINGS"
YAML_END = "# END BINDINGS"
LUA_BEGIN = "-- BEGIN EDGE"
LUA_END = "-- END EDGE"
# The hand-written route whose action every binding route copies.
API_PREFIX = "/api/v1/"
BUFFER_FILTER = "envoy.filters.http.buffer"
BUFFER_PER_ROUTE = "type.googleapis.com/envoy.extensions.filters.http.buffer.v3.BufferPerRoute"
ROUTE_INDENT = " " * 14


def _forward_action(text: str) -> dict[str, Any]:
    """The `route` action of envoy.yaml's hand-written `/api/v1/` prefix route."""
    config = yaml.safe_load(replace_block(text, YAML_BEGIN, YAML_END, "", ENVOY.name))
    listener = config["static_resources"]["listeners"][0]
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    for route in manager["route_config"]["virtual_hosts"][0]["routes"]:
        if route["match"] == {"prefix": API_PREFIX} and "route" in route:
            action: dict[str, Any] = route["route"]
            return action
    raise SystemExit(f"{ENVOY.name}: no route with match {{prefix: {API_PREFIX}}} and an action")


def _served_paths(text: str) -> dict[str, tuple[str, ...]]:
    """Every path the gateway serves (as normalize_path and merge_slashes leave it,
    without a trailing slash) -> the methods it takes: the bindings (edge_limits) and the
    hand-written routes of envoy.yaml that match one exact path and one method (the
    OpenAPI document)."""
    served = {path: list(methods) for path, methods in edge_limits.methods_by_path().items()}
    config = yaml.safe_load(replace_block(text, YAML_BEGIN, YAML_END, "", ENVOY.name))
    listener = config["static_resources"]["listeners"][0]
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    for route in manager["route_config"]["virtual_hosts"][0]["routes"]:
        match = route["match"]
        methods = [
            header["string_match"]["exact"]
            for header in match.get("headers", [])
            if header.get("name") == ":method" and "exact" in header.get("string_match", {})
        ]
        if "path" in match and len(methods) == 1:
            served.setdefault(match["path"].rstrip("/"), []).extend(methods)
    return {path: tuple(sorted(set(methods))) for path, methods in sorted(served.items())}


def _path_regex(path: str) -> str:
    if not re.fullmatch(r"(/[a-z0-9]+)+", path):
        raise SystemExit(f"{path}: a binding path of lower-case letters, digits and slashes only")
    return f"{path}/?"


def yaml_block(text: str) -> str:
    found = bindings()
    check_limits(set(found))
    action = json.dumps(_forward_action(text), separators=(", ", ": "))
    lines = [
        f"{YAML_BEGIN} (written by scripts/gen_edge.py from {SOURCES}; do not edit by hand)",
    ]
    # In edge_limits.BINDINGS's order: the routes are tried in turn, the calls of every
    # sale (tx, fan/resolve) first.
    for key in edge_limits.BINDINGS:
        verb, path = key.split(" ")
        limit = edge_limits.BINDINGS[key].buffer_limit
        match = {
            "safe_regex": {"regex": _path_regex(path)},
            "headers": [{"name": ":method", "string_match": {"exact": verb}}],
        }
        lines += [
            f"- name: {key}",
            f"  match: {json.dumps(match, separators=(', ', ': '))}",
            f"  route: {action}",
            "  typed_per_filter_config:",
            f"    {BUFFER_FILTER}:",
            f'      "@type": {BUFFER_PER_ROUTE}',
            f"      buffer: {{max_request_bytes: {limit}}}",
        ]
    lines.append(YAML_END)
    return "\n".join((ROUTE_INDENT + line) if i else line for i, line in enumerate(lines))


def lua_block(text: str) -> str:
    check_limits(set(bindings()))
    rows = [
        f"  [{lua_text(key)}] = {{{binding.limit}, {lua_text(edge_limits.too_large(key))}}},"
        for key, binding in sorted(edge_limits.BINDINGS.items())
    ]
    paths = [
        f"  [{lua_text(path)}] = {{{lua_text(', '.join(methods))}, "
        f"{lua_text(edge_limits.wrong_method(path, methods))}}},"
        for path, methods in _served_paths(text).items()
    ]
    prefixes = ", ".join(lua_text(keys.PREFIJOS[modo]) for modo in keys.Modo)
    lines = [
        f"{LUA_BEGIN} (written by scripts/gen_edge.py from {SOURCES}, "
        "src/loyalty_grpc/domain/keys.py, domain/detalle.py and api/gateway_protocol.py; "
        "do not edit by hand)",
        "-- Each binding (the name of its route in envoy.yaml) -> the most bytes its body may",
        "-- have (0: none) and the detalle of a body over that.",
        "local BINDINGS = {",
        *rows,
        "}",
        "-- Each path served (without a trailing slash) -> the methods it takes (the Allow",
        "-- header of a 405) and the start of the 405's detalle.",
        "local PATHS = {",
        *paths,
        "}",
        f"local TOO_LARGE_ELSEWHERE = {lua_text(edge_limits.TOO_LARGE_ELSEWHERE)}",
        f"local TOO_LARGE_HEADERS = {lua_text(edge_limits.TOO_LARGE_HEADERS)}",
        f"local MAX_HINT_PATH, MAX_HINT_DISTANCE = {edge_limits.MAX_HINT_PATH}, "
        f"{edge_limits.MAX_HINT_DISTANCE}",
        f"local CONTENT_TYPE_JSON = {lua_text(edge_limits.CONTENT_TYPE_JSON)}",
        f"local FALTA_AUTHORIZATION = {lua_text(keys.FALTA_AUTHORIZATION)}",
        f"local NO_ES_BEARER = {lua_text(keys.NO_ES_BEARER)}",
        f"local CLAVE_DESCONOCIDA = {lua_text(keys.CLAVE_DESCONOCIDA)}",
        f"local KEY_PREFIXES = {{{prefixes}}}",
        f"local KEY_MIN_SECRET = {keys.MIN_SECRET_LENGTH}",
        f"local KNOWN_KEYS, KNOWN_KEY_SECONDS = {edge_limits.KNOWN_KEYS}, "
        f"{edge_limits.KNOWN_KEY_SECONDS}",
        f"local BLOCKED_ADDRESSES, MAX_BLOCK_SECONDS = {edge_limits.BLOCKED_ADDRESSES}, "
        f"{edge_limits.MAX_BLOCK_SECONDS}",
        f"local ADDRESS_BLOCKED = {lua_text(ADDRESS_BLOCKED_KEY)}",
        "-- domain/detalle.py: the longest detalle (characters; a longer one keeps its start",
        "-- and its end around the ellipsis) and the longest client value it shows.",
        f"local MAX_DETALLE, DETALLE_HEAD = {detalle.MAX_DETALLE}, {detalle.HEAD}",
        f"local MAX_SHOWN, ELLIPSIS = {detalle.MAX_SHOWN}, {lua_text(detalle.ELLIPSIS)}",
        LUA_END,
    ]
    return "\n".join(lines)


def render_yaml(text: str) -> str:
    return replace_block(text, YAML_BEGIN, YAML_END, yaml_block(text), ENVOY.name)


def render_lua(text: str) -> str:
    envoy = ENVOY.read_text(encoding="utf-8")
    return replace_block(text, LUA_BEGIN, LUA_END, lua_block(envoy), LUA.name)


if __name__ == "__main__":
    sys.exit(
        main_many(
            [(ENVOY, render_yaml, "BINDINGS"), (LUA, render_lua, "EDGE")],
            doc=__doc__ or "",
            script="gen_edge.py",
        )
    )
