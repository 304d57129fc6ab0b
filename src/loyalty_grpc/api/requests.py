"""Proto requests -> domain values: aliases (one field of each group), google.protobuf.Value
-> plain JSON values, and the domain parsers. Every rule lives in domain/; this module only
picks fields. A typed field for native gRPC callers (api/native_fields.py) is one more
member of its JSON field's group, read as the plain value it carries (`sent`) by the same
parser."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import cast

from google.protobuf import struct_pb2, timestamp_pb2
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from loyalty_grpc.domain.amounts import parse_centavos, parse_importe
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.fan_ref import FAN_FIELDS, FanRef, one_of, parse_fan_ref
from loyalty_grpc.domain.json_value import JsonValue
from loyalty_grpc.domain.programs import MONEDA_POR_OMISION
from loyalty_grpc.domain.text import single_line
from loyalty_grpc.domain.timestamps import from_timestamp, parse_ts
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
from loyalty_grpc.services.pos.sales import NewSale

NUL = "\x00"
ID_EXTERNO_FIELDS = ("id_externo", "id", "tx_id")
CENTAVOS_FIELDS = ("importe_centavos", "centavos", "amount_cents")
# The typed alternatives for native gRPC callers (proto: `nativo_de`).
IMPORTE_TEXTO = "importe_texto"
CENTAVOS_ENTERO = "importe_centavos_entero"
TS_UTC = "ts_utc"
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


def sent(request: Message, names: tuple[str, ...]) -> dict[str, JsonValue | None]:
    """Each field by name as the plain JSON value the caller sent, None when not sent: a
    google.protobuf.Value unset or JSON null, a text empty or blank, an empty list, a
    scalar with presence (`optional`) unset. (Typed fields of native callers and the JSON
    contract's Value fields alike: one rule for "not sent".)"""
    result: dict[str, JsonValue | None] = {}
    for name, rule in zip(names, _rules(type(request), names), strict=True):
        value: JsonValue | None
        if rule == _LIST:
            items = list(getattr(request, name))
            value = cast("JsonValue", items) if items else None
        elif rule == _TEXT:
            text: str = getattr(request, name)
            value = text if text.strip() else None
        elif not request.HasField(name):
            value = None
        elif rule == _VALUE:
            value = json_of(getattr(request, name))
        else:
            value = getattr(request, name)
        result[name] = value
    return result


# How `sent` reads a field, from its descriptor once per message type and group (a
# dict, read without a lock: two threads may both work it out, to the same result).
_LIST, _VALUE, _TEXT, _PRESENCE = "repeated", "google.protobuf.Value", "text", "presence"
_RULES: dict[tuple[type[Message], tuple[str, ...]], tuple[str, ...]] = {}


def _rules(message: type[Message], names: tuple[str, ...]) -> tuple[str, ...]:
    rules = _RULES.get((message, names))
    if rules is None:
        rules = _RULES[(message, names)] = tuple(_rule(message, name) for name in names)
    return rules


def _rule(message: type[Message], name: str) -> str:
    field = message.DESCRIPTOR.fields_by_name[name]
    if field.is_repeated:
        return _LIST
    if field.message_type is not None and field.message_type.full_name == _VALUE:
        return _VALUE
    if field.type == FieldDescriptor.TYPE_STRING:
        return _TEXT
    if field.has_presence and field.message_type is None:
        return _PRESENCE
    raise TypeError(f"{field.full_name}: no rule for what counts as not sent")


def event_time(request: Message, now: datetime) -> datetime:
    """`ts` (the contract's formats) or `ts_utc` (a Timestamp, native callers), at most one;
    neither -> now. Both within the same range (domain/timestamps.py)."""
    ts = values(request, ("ts",))["ts"]
    if not request.HasField(TS_UTC):  # (the usual case, and every JSON call: no group)
        return now if ts is None else parse_ts(ts, now, "ts")
    typed = cast("timestamp_pb2.Timestamp", getattr(request, TS_UTC))
    given: dict[str, JsonValue | timestamp_pb2.Timestamp | None] = {"ts": ts, TS_UTC: typed}
    picked = one_of(given, required=False)
    if picked is None:
        return now
    if isinstance(picked[1], timestamp_pb2.Timestamp):
        return from_timestamp(picked[1].seconds, picked[1].nanos, now, TS_UTC)
    return parse_ts(cast("JsonValue", picked[1]), now, "ts")


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
    # (JsonValue includes None, so one_of's type variable needs the hint.)
    importe = cast(
        "tuple[str, JsonValue] | None",
        one_of(sent(request, ("importe", IMPORTE_TEXTO)), required=False),
    )
    given = cast(
        "tuple[str, JsonValue] | None",
        one_of(sent(request, (*CENTAVOS_FIELDS, CENTAVOS_ENTERO)), required=False),
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
    from_importe = parse_importe(importe[1], importe[0])
    if from_centavos is not None and from_centavos != from_importe:
        raise LoyaltyError(
            CodigoError.IMPORTE_INVALIDO,
            f"{importe[0]} ({from_importe} centavos) y {name} ({from_centavos}) no coinciden",
        )
    return from_importe


def new_sale(request: pb.RegisterTxRequest, now: datetime) -> NewSale:
    picked = one_of(strings(request, ID_EXTERNO_FIELDS))
    assert picked is not None
    id_externo = single_line(picked[1], picked[0], max_length=MAX_ID_EXTERNO)
    moneda = request.moneda.strip() or MONEDA_POR_OMISION
    return NewSale(
        id_externo=id_externo,
        fan=fan_ref(request),
        centavos=_centavos(request),
        moneda=moneda,
        ts=event_time(request, now),
        terminal=_label(request, ("terminal", "caja")),
        sitio=_label(request, ("sitio", "sucursal")),
    )
