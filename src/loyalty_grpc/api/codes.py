"""`promos` and `codes` of the POS API: proto request -> use case -> proto response.

Request rules live in domain.codes (code text, splitting, limits, the promotion
reference); this module only picks fields: exactly one of `promo`/`promo_id` and one of
`codigos`/`codes` (blank text or JSON null counts as not sent), each group with its typed
alternatives for native gRPC callers (`promo_id_entero`, `promo_texto`; `codigos_lista`)."""

from __future__ import annotations

from typing import cast

from sqlalchemy import Engine

from loyalty_grpc.api.requests import sent
from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.codes import code_batch_of_json, parse_promo_ref
from loyalty_grpc.domain.fan_ref import one_of
from loyalty_grpc.domain.json_value import JsonValue
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
from loyalty_grpc.services.pos.codes import deposit_codes
from loyalty_grpc.services.pos.promos import Inventario, list_promos

PROMO_FIELDS = ("promo", "promo_id", "promo_id_entero", "promo_texto")
CODIGOS_FIELDS = ("codigos", "codes", "codigos_lista")


def _inventario(inventario: Inventario) -> pb.Inventario:
    return pb.Inventario(
        disponibles=inventario.disponibles,
        asignados=inventario.asignados,
        canjeados=inventario.canjeados,
        liberados=inventario.liberados,
    )


def list_promos_response(engine: Engine, caller: Caller) -> pb.ListPromosResponse:
    return pb.ListPromosResponse(
        ok=True,
        data=pb.ListPromosData(
            promos=[
                pb.Promo(
                    id=p.id,
                    nombre=p.nombre,
                    estado=p.estado.value,
                    vigencia_fin=p.vigencia_fin.isoformat(),
                    admite_codigos=p.admite_codigos,
                    inventario=_inventario(p.inventario),
                )
                for p in list_promos(engine, caller.programa_id)
            ]
        ),
    )


def _given(request: pb.DepositCodesRequest, names: tuple[str, ...]) -> tuple[str, JsonValue]:
    """The one field of `names` the client sent (blank text is not sent)."""
    given = {
        name: None if isinstance(v, str) and not v.strip() else v
        for name, v in sent(request, names).items()
    }
    # (JsonValue includes None, so one_of's type variable needs the hint.)
    picked = cast("tuple[str, JsonValue] | None", one_of(given))
    assert picked is not None
    return picked


def deposit_codes_response(
    engine: Engine, caller: Caller, request: pb.DepositCodesRequest
) -> pb.DepositCodesResponse:
    promo_field, promo_value = _given(request, PROMO_FIELDS)
    codes_field, codes_value = _given(request, CODIGOS_FIELDS)
    ref = parse_promo_ref(promo_value, promo_field)
    batch = code_batch_of_json(codes_value, codes_field)
    result = deposit_codes(engine, caller.programa_id, ref, batch, campo=promo_field)
    return pb.DepositCodesResponse(
        ok=True,
        data=pb.DepositCodesData(
            promo=pb.PromoRef(
                id=result.promo.id, nombre=result.promo.nombre, estado=result.promo.estado.value
            ),
            recibidos=result.recibidos,
            agregados=result.agregados,
            duplicados=result.duplicados,
            inventario=_inventario(result.inventario),
        ),
    )
