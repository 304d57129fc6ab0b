"""Proto requests -> domain values: aliases (one field of each group), google.protobuf.Value
-> plain JSON values, and the domain parsers. Every rule lives in domain/; this module only
picks fields."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import cast

from google.protobuf import struct_pb2
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from loyalty_grpc.domain.amounts import parse_centavos, parse_importe
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.fan_ref import FAN_FIELDS, FanRef, one_of, parse_fan_ref
from loyalty_grpc.domain.json_value import JsonValue
from loyalty_grpc.domain.programs import MONEDA_POR_OMISION
from loyalty_grpc.domain.text import single_line
from loyalty_grpc.domain.timestamps import parse_ts
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
from loyalty_grpc.services.pos.sales import NewSale

NUL = "\x00"
ID_EXTERNO_FIELDS = ("id_externo", "id", "tx_id")
CENTAVOS_FIELDS = ("importe_centavos", "centavos", "amount_cents")
MAX_ID_EXTERNO = 128
MAX_LABEL = 100


def reject_nul(request: Message) -> None:
    """solicitud_invalida naming the first field of the request with U+0000 in any text
    (strings, map keys, strings inside google.protobuf.Value). PostgreSQL text cannot store
    or compare it: when a statement refuses a value, api/interceptors.py asks this which
    field it was (fields whose own rules catch it, e.g. codes, answer their own error)."""
    for field, value in request.ListFields():
        if _has_nul(field, value):
            raise LoyaltyError(
                CodigoError.SOLICITUD_INVALIDA, f"{field.name}: contiene el carácter NUL (U+0000)"
            )


def _has_nul(field: FieldDescriptor, value: object) -> bool:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key_field, value_field = field.message_type.fields
        entries = cast("Mapping[object, object]", value)
        return any(_has_nul(key_field, k) or _has_nul(value_field, v) for k, v in entries.items())
    items = cast("Iterable[object]", value) if field.is_repeated else (value,)
    if field.type == FieldDescriptor.TYPE_STRING:
        return any(NUL in cast("str", item) for item in items)
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return any(_has_nul(f, v) for item in items for f, v in cast("Message", item).ListFields())
    return False


def json_of(value: struct_pb2.Value) -> JsonValue:
    """A google.protobuf.Value as the plain JSON value the client sent."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        return value.number_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "list_value":
        return [json_of(v) for v in value.list_value.values]
    if kind == "struct_value":
        return {k: json_of(v) for k, v in value.struct_value.fields.items()}
    return None  # null_value or unset


def strings(request: Message, names: tuple[str, ...]) -> dict[str, str | None]:
    """Each string field by name; empty or blank means not sent (proto3 cannot tell)."""
    values: dict[str, str | None] = {}
    for name in names:
        text: str = getattr(request, name)
        values[name] = text if text.strip() else None
    return values


def values(request: Message, names: tuple[str, ...]) -> dict[str, JsonValue | None]:
    """Each google.protobuf.Value field by name; unset or JSON null means not sent."""
    result: dict[str, JsonValue | None] = {}
    for name in names:
        result[name] = json_of(getattr(request, name)) if request.HasField(name) else None
    return result


def fan_ref(request: Message) -> FanRef:
    picked = one_of(strings(request, FAN_FIELDS))
    assert picked is not None
    return parse_fan_ref(picked[1], picked[0])


def _label(request: Message, names: tuple[str, str]) -> str | None:
    picked = one_of(strings(request, names), required=False)
    if picked is None:
        return None
    name, text = picked
    return single_line(text, name, max_length=MAX_LABEL)


def _centavos(request: pb.RegisterTxRequest) -> int:
    """`importe` (pesos) or one of the cents fields; both may be sent when they agree."""
    importe = values(request, ("importe",))["importe"]
    # (JsonValue includes None, so one_of's type variable needs the hint.)
    given = cast(
        "tuple[str, JsonValue] | None", one_of(values(request, CENTAVOS_FIELDS), required=False)
    )
    name, from_centavos = (
        ("", None) if given is None else (given[0], parse_centavos(given[1], given[0]))
    )
    if importe is None:
        if from_centavos is None:
            raise LoyaltyError(
                CodigoError.CAMPO_REQUERIDO, f"falta importe (o {' / '.join(CENTAVOS_FIELDS)})"
            )
        return from_centavos
    from_importe = parse_importe(importe, "importe")
    if from_centavos is not None and from_centavos != from_importe:
        raise LoyaltyError(
            CodigoError.IMPORTE_INVALIDO,
            f"importe ({from_importe} centavos) y {name} ({from_centavos}) no coinciden",
        )
    return from_importe


def new_sale(request: pb.RegisterTxRequest, now: datetime) -> NewSale:
    picked = one_of(strings(request, ID_EXTERNO_FIELDS))
    assert picked is not None
    id_externo = single_line(picked[1], picked[0], max_length=MAX_ID_EXTERNO)
    ts_value = values(request, ("ts",))["ts"]
    moneda = request.moneda.strip() or MONEDA_POR_OMISION
    return NewSale(
        id_externo=id_externo,
        fan=fan_ref(request),
        centavos=_centavos(request),
        moneda=moneda,
        ts=now if ts_value is None else parse_ts(ts_value, now, "ts"),
        terminal=_label(request, ("terminal", "caja")),
        sitio=_label(request, ("sitio", "sucursal")),
    )
