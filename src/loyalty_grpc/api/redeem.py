"""POST /api/v1/redeem: the proto request → the use case's plain values → the proto
response. Single form (`codigo`) or batch form (`codigos`), exactly one of them.

`fan` is always an object and `correo` appears in it only when the key has `fan:leer`
(`"fan": {}` otherwise), as `tx` always sends `fan` with `correo` only under `fan:leer`.

A native gRPC caller (`native`: no gateway mark) also gets the batch's results typed
(`resultados_detalle`, api/native_fields.py): each code's single-form RedeemData, built by
the same function as the single form's answer.
"""

from __future__ import annotations

from datetime import datetime

from google.protobuf import struct_pb2
from sqlalchemy import Engine

from loyalty_grpc.api.requests import _label, event_time, strings
from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.errors import CATALOGO
from loyalty_grpc.domain.fan_ref import one_of
from loyalty_grpc.domain.json_value import JsonValue
from loyalty_grpc.domain.promos import EstadoCodigo
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
from loyalty_grpc.services.pos.redeem import (
    CodeResult,
    RedeemResult,
    Redemption,
    redeem_code,
    redeem_codes,
)

ESTADO = EstadoCodigo.CANJEADO.value


def _redemption(request: pb.RedeemRequest, now: datetime) -> Redemption:
    return Redemption(
        terminal=_label(request, ("terminal", "caja")), ts=event_time(request, now), now=now
    )


def _result_dict(result: RedeemResult, sees_pii: bool) -> dict[str, JsonValue]:
    return {
        "estado": ESTADO,
        "duplicado": result.duplicado,
        "promo": result.promo,
        "fan": {"correo": result.correo} if sees_pii else {},
        "puntos_otorgados": result.puntos_otorgados,
        "puntos_acreditados": result.puntos_acreditados,
    }


def _entry(entry: CodeResult, sees_pii: bool) -> dict[str, JsonValue]:
    """One `resultados` object: {codigo, ok, and the single-form fields or error}."""
    if entry.result is not None:
        return {"codigo": entry.codigo, "ok": True, **_result_dict(entry.result, sees_pii)}
    assert entry.error is not None
    return {
        "codigo": entry.codigo,
        "ok": False,
        "error": {"codigo": entry.error.value, "mensaje": CATALOGO[entry.error].mensaje},
    }


def _single(result: RedeemResult, sees_pii: bool) -> pb.RedeemData:
    """The single form's `data` (also each typed batch entry's `canje`)."""
    data = pb.RedeemData(
        codigo=result.codigo,
        estado=ESTADO,
        duplicado=result.duplicado,
        promo=result.promo,
        puntos_otorgados=result.puntos_otorgados,
        puntos_acreditados=result.puntos_acreditados,
    )
    data.fan.SetInParent()
    if sees_pii:
        data.fan.correo = result.correo
    return data


def _typed_entry(entry: CodeResult, sees_pii: bool) -> pb.RedeemResultado:
    """One entry of `resultados_detalle` (native gRPC callers)."""
    if entry.result is not None:
        return pb.RedeemResultado(
            codigo=entry.codigo, ok=True, canje=_single(entry.result, sees_pii)
        )
    assert entry.error is not None
    return pb.RedeemResultado(
        codigo=entry.codigo,
        ok=False,
        error=pb.RedeemResultadoError(
            codigo=entry.error.value, mensaje=CATALOGO[entry.error].mensaje
        ),
    )


def redeem_response(
    engine: Engine, caller: Caller, request: pb.RedeemRequest, now: datetime, *, native: bool
) -> pb.RedeemResponse:
    """`native`: the call did not come through the gateway (typed batch results too)."""
    # Proto3 cannot tell an empty list from an absent one: `codigos: []` is "not sent".
    given: dict[str, str | list[str] | None] = {
        "codigo": strings(request, ("codigo",))["codigo"],
        "codigos": list(request.codigos) or None,
    }
    picked = one_of(given)
    assert picked is not None
    sees_pii = caller.sees_personal_data
    if isinstance(picked[1], str):
        result = redeem_code(engine, caller, picked[1], _redemption(request, now))
        return pb.RedeemResponse(ok=True, data=_single(result, sees_pii))
    texts = picked[1]
    batch = redeem_codes(engine, caller, texts, _redemption(request, now))
    resultados = struct_pb2.ListValue()
    for entry in batch.resultados:
        resultados.add_struct().update(_entry(entry, sees_pii))
    resumen = batch.resumen
    data = pb.RedeemData(
        resumen=pb.RedeemResumen(
            recibidos=resumen.recibidos,
            canjeados=resumen.canjeados,
            duplicados=resumen.duplicados,
            rechazados=resumen.rechazados,
        ),
        resultados=resultados,
    )
    if native:
        data.resultados_detalle.resultados.extend(
            _typed_entry(entry, sees_pii) for entry in batch.resultados
        )
    return pb.RedeemResponse(ok=True, data=data)
