"""`roster` at the edge: the two bindings' parameters -> (desde, limite), and a page ->
RosterData.

GET carries `desde` and `limite` as query-string text (proto strings); the POST binding
carries them as JSON values with the contract's types (`desde` string or number, `limite`
a number: a JSON text there is solicitud_invalida). Both end in the same rules: blank
`desde` means a new snapshot; a number is never a cursor this service issued
(cursor_invalido); `limite` as domain/roster.py rules (default 500, at most 2000). Native
gRPC callers may send the POST's typed alternatives `desde_texto` and `limite_entero`
instead (one of each pair)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from loyalty_grpc.api.requests import sent, strings
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.fan_ref import one_of
from loyalty_grpc.domain.integers import integral
from loyalty_grpc.domain.json_value import JsonValue, json_type_name
from loyalty_grpc.domain.promos import EstadoFan
from loyalty_grpc.domain.roster import limite_invalido, parse_limite
from loyalty_grpc.domain.timestamps import format_iso_utc
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
from loyalty_grpc.services.pos.roster import RosterPage

_FIELDS = ("desde", "limite")


@dataclass(frozen=True)
class RosterQuery:
    desde: str | None
    limite: int


def _desde(value: JsonValue) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, int | float) and not isinstance(value, bool):
        # A JSON number is allowed by the contract but is never one of our cursors: the
        # service refuses it as cursor_invalido, naming what arrived.
        whole = integral(value)
        return str(whole) if whole is not None else str(value)
    raise LoyaltyError(
        CodigoError.SOLICITUD_INVALIDA,
        f"desde: debe ser el texto `siguiente` de la llamada anterior; "
        f"llegó {json_type_name(value)}",
    )


def query_of_get(request: pb.RosterRequest) -> RosterQuery:
    """GET /api/v1/roster?desde=…&limite=… (query-string text)."""
    given = strings(request, _FIELDS)
    return RosterQuery(desde=_desde(given["desde"]), limite=parse_limite(given["limite"]))


def query_of_post(request: pb.RosterPostRequest) -> RosterQuery:
    """POST /api/v1/roster with {"desde": …, "limite": …} (or a native caller's
    `desde_texto`, `limite_entero`)."""
    # (JsonValue includes None, so one_of's type variable needs the hint.)
    desde = cast(
        "tuple[str, JsonValue] | None",
        one_of(sent(request, ("desde", "desde_texto")), required=False),
    )
    limite = cast(
        "tuple[str, JsonValue] | None",
        one_of(sent(request, ("limite", "limite_entero")), required=False),
    )
    if limite is not None and limite[0] == "limite" and isinstance(limite[1], str):
        raise limite_invalido("llegó un texto (en el cuerpo JSON es un número)")
    return RosterQuery(
        desde=None if desde is None else _desde(desde[1]),
        limite=parse_limite(None if limite is None else limite[1]),
    )


def roster_data(page: RosterPage) -> pb.RosterData:
    """The page as RosterData; `baja` only for a fan in `baja` (an unset message field is
    absent from the JSON). Entries are added in place (a snapshot page has 2,000)."""
    data = pb.RosterData(desde=page.desde, hay_mas=page.hay_mas, siguiente=page.siguiente)
    add = data.fans.add
    for e in page.fans:
        fan = add(
            id=e.fan_id,
            nombre=e.nombre,
            correo=e.correo,
            socio_desde=e.socio_desde,
            puntos=e.puntos,
            estado=e.estado.value,
            actualizado=format_iso_utc(e.actualizado),
        )
        if e.estado is EstadoFan.BAJA and e.baja_en is not None:
            fan.baja.en = format_iso_utc(e.baja_en)
            fan.baja.motivo = e.baja_motivo or ""
    return data
