"""Generate gateway/openapi.json, the OpenAPI 3.1 document of the JSON API, from its single
sources: the HTTP bindings and messages of loyalty.v1.PosService (the compiled proto
descriptors), the error catalogue (domain/errors.py CATALOGO) and the permission table
(domain/permissions.py REQUIRED). Envoy serves the file at /api/v1/openapi.json.

    python scripts/gen_openapi.py           # rewrite gateway/openapi.json
    python scripts/gen_openapi.py --check   # exit 1 when gateway/openapi.json is stale

What the descriptors cannot say (the JSON types a google.protobuf.Value field takes, which
fields are present only sometimes, enums, formats, limits) is in the small tables below,
taken from the contract (shared/spec/pos-api-v1.md) and DESIGN.md §2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from google.api import annotations_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor

from loyalty_grpc.domain.errors import CATALOGO, Codigo
from loyalty_grpc.domain.permissions import REQUIRED, Permiso
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "gateway" / "openapi.json"
SERVICE = "PosService"
PACKAGE = "loyalty.v1"
# The contract's title (shared/spec/pos-api-v1.md).
TITLE = "Loyalty Point-of-Sale Integration API v1"
VERSION = "v1"

Schema = dict[str, Any]

STRING_OR_NUMBER: Schema = {"oneOf": [{"type": "string"}, {"type": "number"}]}
DATE: Schema = {"type": "string", "format": "date"}
DATE_TIME: Schema = {"type": "string", "format": "date-time"}
MAX_REDEEM_CODES = 500
MAX_DEPOSIT_CODES = 5000
LIMITE_MAX = 2000

# "Message.field" -> its schema, where the descriptor alone is not enough.
FIELD_SCHEMAS: dict[str, Schema] = {
    # Requests: the JSON types the contract accepts for each google.protobuf.Value field.
    "RegisterTxRequest.importe": {
        **STRING_OR_NUMBER,
        "description": "Pesos: a number, or a string with either separator convention "
        'and an optional leading currency symbol ("$1,234.50").',
    },
    "RegisterTxRequest.importe_centavos": {
        "type": "integer",
        "minimum": 0,
        "description": "Integer cents.",
    },
    "RegisterTxRequest.centavos": {
        "type": "integer",
        "minimum": 0,
        "description": "Alias of importe_centavos.",
    },
    "RegisterTxRequest.amount_cents": {
        "type": "integer",
        "minimum": 0,
        "description": "Alias of importe_centavos.",
    },
    "RegisterTxRequest.ts": {
        **STRING_OR_NUMBER,
        "description": "ISO 8601, epoch seconds, epoch milliseconds or "
        '"YYYY-MM-DD hh:mm:ss"; without a time zone it is UTC.',
    },
    "RedeemRequest.ts": {
        **STRING_OR_NUMBER,
        "description": "ISO 8601, epoch seconds, epoch milliseconds or "
        '"YYYY-MM-DD hh:mm:ss"; without a time zone it is UTC.',
    },
    "RedeemRequest.codigos": {
        "type": "array",
        "items": {"type": "string"},
        "maxItems": MAX_REDEEM_CODES,
        "description": f"Batch form, up to {MAX_REDEEM_CODES} codes.",
    },
    "DepositCodesRequest.promo": {
        "oneOf": [{"type": "integer"}, {"type": "string"}],
        "description": "Promotion id, or its exact name (case-insensitive).",
    },
    "DepositCodesRequest.promo_id": {
        "oneOf": [{"type": "integer"}, {"type": "string"}],
        "description": "Alias of promo.",
    },
    "DepositCodesRequest.codigos": {
        "oneOf": [
            {"type": "array", "items": {"type": "string"}, "maxItems": MAX_DEPOSIT_CODES},
            {"type": "string"},
        ],
        "description": f"An array of codes, or the codes as pasted text (split on "
        f"whitespace, commas and semicolons); at most {MAX_DEPOSIT_CODES}.",
    },
    "DepositCodesRequest.codes": {
        "oneOf": [
            {"type": "array", "items": {"type": "string"}, "maxItems": MAX_DEPOSIT_CODES},
            {"type": "string"},
        ],
        "description": "Alias of codigos.",
    },
    "RosterPostRequest.desde": {
        **STRING_OR_NUMBER,
        "description": "The `siguiente` of the previous call; absent: a new snapshot.",
    },
    "RosterPostRequest.limite": {
        "type": "integer",
        "minimum": 1,
        "description": f"Page size; default 500; values over {LIMITE_MAX} are served as "
        f"{LIMITE_MAX}.",
    },
    # GET /api/v1/roster query parameters (proto strings parsed by the server).
    "RosterRequest.desde": {
        "type": "string",
        "description": "The `siguiente` of the previous call; absent: a new snapshot.",
    },
    "RosterRequest.limite": {
        "type": "integer",
        "minimum": 1,
        "description": f"Page size; default 500; values over {LIMITE_MAX} are served as "
        f"{LIMITE_MAX}.",
    },
    # Responses.
    "ResolveFanData.promo": {
        "type": ["object", "null"],
        "description": "The fan's current promotion, or null (not an error).",
        "properties": {
            "nombre": {"type": "string"},
            "descripcion": {"type": "string"},
            "vigencia_fin": DATE,
            "codigo": {"type": "string"},
        },
        "required": ["nombre", "descripcion", "vigencia_fin", "codigo"],
    },
    "RedeemData.resultados": {
        "type": "array",
        "description": "One object per input code, in input order.",
        "items": {
            "type": "object",
            "properties": {
                "codigo": {"type": "string"},
                "ok": {"type": "boolean"},
                "estado": {"const": "canjeado"},
                "duplicado": {"type": "boolean"},
                "promo": {"type": "string"},
                "fan": {"type": "object", "properties": {"correo": {"type": "string"}}},
                "puntos_otorgados": {"type": "integer"},
                "error": {
                    "type": "object",
                    "properties": {"codigo": {"type": "string"}, "mensaje": {"type": "string"}},
                    "required": ["codigo", "mensaje"],
                },
            },
            "required": ["codigo", "ok"],
        },
    },
    "RedeemData.estado": {"const": "canjeado"},
    "PingData.modo": {"enum": ["vivo", "prueba"]},
    "PingGetData.modo": {"enum": ["vivo", "prueba"]},
    "PingData.permisos": {"type": "array", "items": {"enum": [p.value for p in Permiso]}},
    "PingData.hora": DATE_TIME,
    "PingGetData.hora": DATE_TIME,
    "Promo.estado": {"enum": ["activa", "pausada", "terminada"]},
    "PromoRef.estado": {"enum": ["activa", "pausada", "terminada"]},
    "Promo.vigencia_fin": DATE,
    "RosterFan.estado": {"enum": ["activo", "baja"]},
    "RosterFan.actualizado": DATE_TIME,
    "Baja.en": DATE_TIME,
}

# Message fields that are absent in some responses (an unset message field is not printed).
SOMETIMES_ABSENT = {"RosterFan.baja"}

# Messages whose fields come in alternative groups: {"oneOf": [{"required": group}, ...]}.
ALTERNATIVE_FORMS: dict[str, list[list[str]]] = {
    "RedeemData": [
        ["codigo", "estado", "duplicado", "promo", "fan", "puntos_otorgados"],
        ["resumen", "resultados"],
    ],
}

# Request fields of which a client sends one: the canonical name and its aliases.
ALIAS_GROUPS: dict[str, list[list[str]]] = {
    "ResolveFanRequest": [["fan", "fan_id", "qr", "codigo"]],
    "RegisterTxRequest": [
        ["id_externo", "id", "tx_id"],
        ["fan", "fan_id", "qr", "codigo"],
        ["importe", "importe_centavos", "centavos", "amount_cents"],
    ],
    "RedeemRequest": [["codigo", "codigos"]],
    "DepositCodesRequest": [["promo", "promo_id"], ["codigos", "codes"]],
}

# One line per operation (the proto's comments are not in the runtime descriptors).
SUMMARIES = {
    "Ping": "Check that the key works (all five fields).",
    "PingGet": "Check that the key works (programa, modo and hora only).",
    "ResolveFan": "Identify a fan and any current promotion; changes no business state.",
    "RegisterTx": "Register a closed sale and credit points; idempotent by id_externo.",
    "Redeem": "Burn one coupon code (codigo) or a batch (codigos); idempotent by code.",
    "ListPromos": "List the program's promotions with their coupon inventory.",
    "DepositCodes": "Deposit coupon codes into a promotion's inventory.",
    "Roster": "Change feed of the fan roster (parameters in the query string).",
    "RosterPost": "Change feed of the fan roster (parameters in a JSON body).",
}

# Request examples: the explicit cases schemathesis tries first (the e2e test creates a
# program that has these fans, codes and promotions).
EXAMPLES: dict[str, Schema] = {
    "ResolveFanRequest": {"fan": "HAL0001"},
    "RegisterTxRequest": {
        "id_externo": "V-1001",
        "fan": "HAL0001",
        "importe": "1,234.50",
        "terminal": "Caja 3",
        "ts": "2024-05-01T18:30:00-06:00",
    },
    "RedeemRequest": {"codigo": "HD-0001", "terminal": "Caja 3"},
    "DepositCodesRequest": {"promo": "2x1 Hot Dog", "codigos": ["HD-0101", "HD-0102"]},
    "RosterPostRequest": {"limite": 100},
}

SCALARS: dict[int, Schema] = {
    FieldDescriptor.TYPE_STRING: {"type": "string"},
    FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    FieldDescriptor.TYPE_INT32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_DOUBLE: {"type": "number"},
}
WELL_KNOWN: dict[str, Schema] = {
    "google.protobuf.Value": {},
    "google.protobuf.ListValue": {"type": "array"},
    "google.protobuf.Struct": {"type": "object"},
}

HEADERS: dict[str, Schema] = {
    "RateLimit": {
        "description": "Remaining quota of the key in the current window "
        "(IETF RateLimit header fields draft).",
        "schema": {"type": "string"},
    },
    "RateLimit-Policy": {
        "description": "The quota policy (the contract: 600 calls per minute).",
        "schema": {"type": "string"},
    },
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "integer", "minimum": 0},
    },
}


def _ref(kind: str, name: str) -> Schema:
    return {"$ref": f"#/components/{kind}/{name}"}


class Builder:
    def __init__(self) -> None:
        self.schemas: dict[str, Schema] = {}

    def message(self, descriptor: Descriptor) -> Schema:
        """A reference to the schema of `descriptor` (built once)."""
        if descriptor.full_name in WELL_KNOWN:
            return dict(WELL_KNOWN[descriptor.full_name])
        if descriptor.file.package != PACKAGE:
            raise SystemExit(f"no schema for {descriptor.full_name}")
        name = descriptor.name
        if name not in self.schemas:
            self.schemas[name] = {}  # placeholder: recursion-safe
            self.schemas[name] = self._object(descriptor)
        return _ref("schemas", name)

    def _object(self, descriptor: Descriptor) -> Schema:
        properties: dict[str, Schema] = {}
        required: list[str] = []
        is_request = descriptor.name.endswith("Request")
        for field in descriptor.fields:
            key = f"{descriptor.name}.{field.name}"
            properties[field.name] = self.field(field, key)
            if is_request or descriptor.name in ALTERNATIVE_FORMS:
                continue
            # Printed always: plain scalars (always_print_primitive_fields), repeated
            # fields and set message fields; `optional` scalars only when set.
            is_message = field.message_type is not None
            if (
                field.is_repeated or not field.has_presence or is_message
            ) and key not in SOMETIMES_ABSENT:
                required.append(field.name)
        schema: Schema = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        if descriptor.name in ALTERNATIVE_FORMS:
            schema["oneOf"] = [{"required": form} for form in ALTERNATIVE_FORMS[descriptor.name]]
        if descriptor.name in ALIAS_GROUPS:
            groups = ALIAS_GROUPS[descriptor.name]
            schema["description"] = (
                "Send one field of each group: "
                + "; ".join(" / ".join(f"`{name}`" for name in group) for group in groups)
                + "."
            )
            schema["allOf"] = [
                {"anyOf": [{"required": [name]} for name in group]} for group in groups
            ]
        if descriptor.name in EXAMPLES:
            schema["examples"] = [EXAMPLES[descriptor.name]]
        return schema

    def field(self, field: FieldDescriptor, key: str) -> Schema:
        if key in FIELD_SCHEMAS:
            return dict(FIELD_SCHEMAS[key])
        if field.message_type is not None:
            item = self.message(field.message_type)
        elif field.type in SCALARS:
            item = dict(SCALARS[field.type])
        else:
            raise SystemExit(f"{key}: no JSON schema for field type {field.type}")
        return {"type": "array", "items": item} if field.is_repeated else item


def error_responses() -> dict[str, Schema]:
    """components/responses: one per HTTP status of the catalogue (HTTP API entries)."""
    by_status: dict[int, list[Codigo]] = {}
    for entrada in CATALOGO.values():
        if not entrada.interno:
            by_status.setdefault(entrada.http, []).append(entrada.codigo)
    responses: dict[str, Schema] = {}
    for status in sorted(by_status):
        codigos = sorted(by_status[status])
        lines = [f"- `{c.value}`: {CATALOGO[c].cuando}" for c in codigos]
        headers = {
            "RateLimit": _ref("headers", "RateLimit"),
            "RateLimit-Policy": _ref("headers", "RateLimit-Policy"),
        }
        if status == 429:
            headers["Retry-After"] = _ref("headers", "Retry-After")
        responses[f"Error{status}"] = {
            "description": "\n".join(lines),
            "headers": headers,
            "content": {
                "application/json": {
                    "schema": {
                        "allOf": [_ref("schemas", "ErrorEnvelope")],
                        "properties": {
                            "error": {
                                "properties": {"codigo": {"enum": [c.value for c in codigos]}}
                            }
                        },
                    }
                }
            },
        }
    return responses


ERROR_ENVELOPE: Schema = {
    "type": "object",
    "description": "Every failure. Clients branch on `error.codigo`, never on `mensaje`.",
    "properties": {
        "ok": {"const": False},
        "error": {
            "type": "object",
            "properties": {
                "codigo": {"type": "string"},
                "mensaje": {"type": "string"},
                "detalle": {"type": "string"},
            },
            "required": ["codigo", "mensaje"],
        },
    },
    "required": ["ok", "error"],
}


def _http_rule(method: MethodDescriptor) -> tuple[str, str, str]:
    """(HTTP method, path, body) of the google.api.http option."""
    rule = method.GetOptions().Extensions[annotations_pb2.http]
    verb = rule.WhichOneof("pattern")
    if verb not in ("get", "post", "put", "patch", "delete"):
        raise SystemExit(f"{method.full_name}: no google.api.http binding")
    return verb, str(getattr(rule, verb)), str(rule.body)


def _permission_text(name: str) -> str:
    needed = REQUIRED[name]
    if needed is None:
        return "Permission: none special (any valid key)."
    return f"Permission: `{needed.value}`."


def build() -> Schema:
    service = pos_service_pb2.DESCRIPTOR.services_by_name[SERVICE]
    builder = Builder()
    paths: dict[str, dict[str, Schema]] = {}
    for method in service.methods:
        verb, path, body = _http_rule(method)
        output = method.output_type
        data_type = output.fields_by_name["data"].message_type
        if data_type is None:
            raise SystemExit(f"{output.full_name}.data must be a message")
        success = {
            "type": "object",
            "properties": {"ok": {"const": True}, "data": builder.message(data_type)},
            "required": ["ok", "data"],
        }
        operation: Schema = {
            "operationId": method.name,
            "summary": SUMMARIES[method.name],
            "description": f"{_permission_text(method.name)} gRPC: "
            f"`{service.full_name}/{method.name}`.",
            "responses": {
                "200": {
                    "description": "Success envelope.",
                    "headers": {
                        "RateLimit": _ref("headers", "RateLimit"),
                        "RateLimit-Policy": _ref("headers", "RateLimit-Policy"),
                    },
                    "content": {"application/json": {"schema": success}},
                },
                **{
                    name.removeprefix("Error"): _ref("responses", name)
                    for name in error_responses()
                },
            },
        }
        request = method.input_type
        if body == "*":
            operation["requestBody"] = {
                # ping takes no body (an empty JSON object is accepted too).
                "required": bool(request.fields),
                "content": {"application/json": {"schema": builder.message(request)}},
            }
        elif body:
            raise SystemExit(f'{method.full_name}: only body "*" is supported')
        else:
            params = [
                {
                    "name": field.name,
                    "in": "query",
                    "required": False,
                    "schema": builder.field(field, f"{request.name}.{field.name}"),
                }
                for field in request.fields
            ]
            if params:
                operation["parameters"] = params
        paths.setdefault(path, {})[verb] = operation

    schemas = {**builder.schemas, "ErrorEnvelope": ERROR_ENVELOPE}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": TITLE,
            "version": VERSION,
            "description": (
                "The JSON API of the loyalty service, served by Envoy (gRPC-JSON "
                'transcoding of loyalty.v1.PosService). Success: `{"ok": true, "data": '
                '…}`; failure: `{"ok": false, "error": {"codigo", "mensaje", '
                '"detalle"}}`. A request body is one JSON object as RFC 8259 defines it '
                "(no trailing commas, comments, single quotes or NaN; no key twice), sent "
                "as `Content-Type: application/json` in UTF-8, with the JSON types of the "
                "schemas below (null: not sent); anything else is 400 "
                "`solicitud_invalida`. Generated by scripts/gen_openapi.py from the proto "
                "descriptors and the error catalogue; do not edit."
            ),
        },
        "servers": [{"url": "/", "description": "The host that serves this document."}],
        "security": [{"bearer": []}],
        "paths": {path: paths[path] for path in sorted(paths)},
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "`Authorization: Bearer lp_vivo_…` (live key) or "
                    "`lp_prueba_…` (test key: 0 points on tx and redeem).",
                }
            },
            "headers": HEADERS,
            "responses": error_responses(),
            "schemas": {name: schemas[name] for name in sorted(schemas)},
        },
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail when the output is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text(encoding="utf-8") != text:
            print(f"{OUTPUT.relative_to(ROOT)} is stale: run python scripts/gen_openapi.py")
            return 1
        print(f"{OUTPUT.relative_to(ROOT)} is fresh")
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
