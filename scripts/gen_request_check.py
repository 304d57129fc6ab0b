"""Generate the ROUTES table of gateway/request_check.lua (the gateway's strict request
check) from the HTTP bindings and request messages of loyalty.v1.PosService, with the
parse limits of src/loyalty_grpc/api/edge_limits.py.

    python scripts/gen_request_check.py           # rewrite the block in place
    python scripts/gen_request_check.py --check   # exit 1 when the block is stale

For every binding, "METHOD /path" → whether it takes a JSON body, and each request field
under every name the transcoder accepts for it (the proto name and, when it differs, its
lowerCamelCase JSON name) → {the proto name, its kind}:

- "s": a string field (JSON text, or null = not sent);
- "S": a repeated string field (a JSON list of texts, or null = not sent);
- "v": a google.protobuf.Value (any JSON value: the server reads it and answers the
  field's own error for a wrong type, e.g. importe_invalido);
- "n": a field for native gRPC callers only (`(nativo_de)`, api/native_fields.py), whatever
  its type: refused in a JSON body or URL, with the detalle that names the JSON field to
  send instead.

Any other field type stops the script: decide its JSON rule in request_check.lua first.

With each route its limits (edge_limits.py): the most bytes its body may have (FLOOR on a
binding without one, as the buffer filter's) and the detalle of a body over that (the
buffer filter lets a body over its limit through when it
arrives whole in one read, e.g. one HTTP/2 DATA frame with END_STREAM), the most elements a
list may have, the detalle of too many members or elements (and of a body on a binding
without one), and for
the fields that carry codes the demasiados_codigos detalle the server gives
(domain.codes.too_many_codes); and, for all routes, MAX_DEPTH, MAX_MEMBERS and the
Content-Type refusal (shared with envelope.lua). A binding without limits in
edge_limits.BINDINGS, or limits without a binding, stops the script.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from generated_block import main, replace_block
from google.api import annotations_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor

from loyalty_grpc.api import edge_limits
from loyalty_grpc.api.native_fields import native_of, not_in_json
from loyalty_grpc.domain.codes import too_many_codes
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2

ROOT = Path(__file__).resolve().parents[1]
LUA = ROOT / "gateway" / "request_check.lua"
SERVICE = "PosService"
BEGIN = "-- BEGIN ROUTES"
END = "-- END ROUTES"
HEADER = (
    f"{BEGIN} (written by scripts/gen_request_check.py from "
    "proto/loyalty/v1/pos_service.proto and src/loyalty_grpc/api/edge_limits.py; "
    "do not edit by hand)"
)
VALUE = "google.protobuf.Value"


def _binding(method: MethodDescriptor) -> tuple[str, str, bool]:
    """(HTTP method, path, takes a body) of the google.api.http option."""
    rule = method.GetOptions().Extensions[annotations_pb2.http]
    verb = rule.WhichOneof("pattern")
    if verb not in ("get", "post", "put", "patch", "delete"):
        raise SystemExit(f"{method.full_name}: no google.api.http binding")
    path = str(getattr(rule, verb))
    if "{" in path or ":" in path:
        raise SystemExit(
            f"{method.full_name}: path variables and verbs are not supported "
            f"by request_check.lua ({path})"
        )
    if rule.body not in ("", "*"):
        raise SystemExit(f'{method.full_name}: only body "*" is supported')
    if rule.additional_bindings:
        raise SystemExit(f"{method.full_name}: additional_bindings are not supported")
    return verb.upper(), path, rule.body == "*"


def _kind(field: FieldDescriptor, where: str) -> str:
    if field.type == FieldDescriptor.TYPE_STRING:
        return "S" if field.is_repeated else "s"
    if (
        field.message_type is not None
        and field.message_type.full_name == VALUE
        and not field.is_repeated
    ):
        return "v"
    raise SystemExit(f"{where}.{field.name}: no JSON rule for this field type in request_check.lua")


def _fields(request: Descriptor) -> dict[str, tuple[str, str, str]]:
    """Each name the transcoder reads -> (the proto name, its kind, the refusal of a
    native-only field or "")."""
    names: dict[str, tuple[str, str, str]] = {}
    for field in request.fields:
        json_name = native_of(field)
        entry = (
            (field.name, _kind(field, request.full_name), "")
            if json_name is None
            else (field.name, "n", not_in_json(field.name, json_name))
        )
        for name in (field.name, field.json_name):
            if names.get(name, entry) != entry:
                raise SystemExit(f"{request.full_name}: {name!r} names two fields")
            names[name] = entry
    return names


def _lua_string(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_/ ]+", text):
        raise SystemExit(f"unexpected characters in {text!r}")
    return f'"{text}"'


def lua_text(text: str) -> str:
    """A Lua string literal of `text` (any printable text, UTF-8 kept)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise SystemExit(f"control characters in {text!r}")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def check_limits(keys: set[str]) -> None:
    """Every binding has its limits in edge_limits.BINDINGS, and nothing else does."""
    missing = sorted(keys - set(edge_limits.BINDINGS))
    extra = sorted(set(edge_limits.BINDINGS) - keys)
    if missing or extra:
        raise SystemExit(
            f"edge_limits.BINDINGS does not match the proto's bindings: missing {missing}, "
            f"not bound {extra}"
        )


def _limits(key: str, fields: dict[str, tuple[str, str, str]]) -> str:
    limits = edge_limits.BINDINGS[key]
    canonical = {name for name, kind, _ in fields.values() if kind != "n"}
    unknown = sorted(set(limits.codes_fields) - canonical)
    if unknown:
        raise SystemExit(f"{key}: codes_fields {unknown} are not fields of its request")
    closing = "\n    " if limits.codes_fields else ""
    too_many = "".join(
        f"\n      [{_lua_string(name)}] = {lua_text(too_many_codes(name, limits.max_elements))},"
        for name in limits.codes_fields
    )
    no_body = "" if limits.body else f"\n    no_body = {lua_text(edge_limits.no_body(key))},"
    body_limit = (
        f"\n    limit = {limits.buffer_limit},"
        f"\n    too_large = {lua_text(edge_limits.too_large(key))},"
    )
    return (
        f"{no_body}{body_limit}"
        f"\n    max_elements = {limits.max_elements},"
        f"\n    members = {lua_text(edge_limits.too_many_members(key))},"
        f"\n    elements = {lua_text(edge_limits.too_many_elements(key))},"
        f"\n    too_many = {{{too_many}{closing}}},"
    )


def bindings() -> dict[str, tuple[MethodDescriptor, bool]]:
    """Each HTTP binding of the service, "METHOD /path" -> (its method, takes a body)."""
    service = pos_service_pb2.DESCRIPTOR.services_by_name[SERVICE]
    found: dict[str, tuple[MethodDescriptor, bool]] = {}
    for method in service.methods:
        verb, path, body = _binding(method)
        key = f"{verb} {path}"
        if key in found:
            raise SystemExit(f"{key} is bound twice")
        found[key] = (method, body)
    return found


def block() -> str:
    found = bindings()
    check_limits(set(found))
    routes: dict[str, str] = {}
    for key, (method, body) in found.items():
        fields = _fields(method.input_type)
        entries = "".join(
            f'\n      [{_lua_string(name)}] = {{{_lua_string(canonical)}, "{kind}"'
            + (f", {lua_text(refusal)}" if refusal else "")
            + "},"
            for name, (canonical, kind, refusal) in sorted(fields.items())
        )
        closing = "\n    " if entries else ""
        routes[key] = (
            f"  [{_lua_string(key)}] = {{\n    body = {str(body).lower()},"
            f"{_limits(key, fields)}"
            f"\n    fields = {{{entries}{closing}}},\n  }},"
        )
    lines = [
        HEADER,
        f"local MAX_DEPTH = {edge_limits.MAX_DEPTH}",
        f"local MAX_MEMBERS = {edge_limits.MAX_MEMBERS}",
        f"local CONTENT_TYPE_JSON = {lua_text(edge_limits.CONTENT_TYPE_JSON)}",
        "local ROUTES = {",
        *(routes[key] for key in sorted(routes)),
        "}",
        END,
    ]
    return "\n".join(lines)


def render(text: str) -> str:
    return replace_block(text, BEGIN, END, block(), LUA.name)


if __name__ == "__main__":
    sys.exit(main(LUA, render, doc=__doc__ or "", what="ROUTES", script="gen_request_check.py"))
