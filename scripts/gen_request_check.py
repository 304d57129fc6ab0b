"""Generate the ROUTES table of gateway/request_check.lua (the gateway's strict request
check) from the HTTP bindings and request messages of loyalty.v1.PosService.

    python scripts/gen_request_check.py           # rewrite the block in place
    python scripts/gen_request_check.py --check   # exit 1 when the block is stale

For every binding, "METHOD /path" → whether it takes a JSON body, and each request field
under every name the transcoder accepts for it (the proto name and, when it differs, its
lowerCamelCase JSON name) → {the proto name, its kind}:

- "s": a string field (JSON text, or null = not sent);
- "S": a repeated string field (a JSON list of texts, or null = not sent);
- "v": a google.protobuf.Value (any JSON value: the server reads it and answers the
  field's own error for a wrong type, e.g. importe_invalido).

Any other field type stops the script: decide its JSON rule in request_check.lua first.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from generated_block import main, replace_block
from google.api import annotations_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor

from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2

ROOT = Path(__file__).resolve().parents[1]
LUA = ROOT / "gateway" / "request_check.lua"
SERVICE = "PosService"
BEGIN = "-- BEGIN ROUTES"
END = "-- END ROUTES"
HEADER = (
    f"{BEGIN} (written by scripts/gen_request_check.py from "
    "proto/loyalty/v1/pos_service.proto; do not edit by hand)"
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


def _fields(request: Descriptor) -> dict[str, tuple[str, str]]:
    names: dict[str, tuple[str, str]] = {}
    for field in request.fields:
        entry = (field.name, _kind(field, request.full_name))
        for name in (field.name, field.json_name):
            if names.get(name, entry) != entry:
                raise SystemExit(f"{request.full_name}: {name!r} names two fields")
            names[name] = entry
    return names


def _lua_string(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_/ ]+", text):
        raise SystemExit(f"unexpected characters in {text!r}")
    return f'"{text}"'


def block() -> str:
    service = pos_service_pb2.DESCRIPTOR.services_by_name[SERVICE]
    routes: dict[str, str] = {}
    for method in service.methods:
        verb, path, body = _binding(method)
        fields = _fields(method.input_type)
        key = f"{verb} {path}"
        if key in routes:
            raise SystemExit(f"{key} is bound twice")
        entries = "".join(
            f'\n    [{_lua_string(name)}] = {{{_lua_string(canonical)}, "{kind}"}},'
            for name, (canonical, kind) in sorted(fields.items())
        )
        closing = "\n  " if entries else ""
        routes[key] = (
            f"  [{_lua_string(key)}] = {{body = {str(body).lower()}, "
            f"fields = {{{entries}{closing}}}}},"
        )
    lines = [HEADER, "local ROUTES = {", *(routes[key] for key in sorted(routes)), "}", END]
    return "\n".join(lines)


def render(text: str) -> str:
    return replace_block(text, BEGIN, END, block(), LUA.name)


if __name__ == "__main__":
    sys.exit(main(LUA, render, doc=__doc__ or "", what="ROUTES", script="gen_request_check.py"))
