"""PosService: thin. Convert the request, call the use case, convert the result; no
try/except (the interceptor maps errors). The typed response fields of native gRPC callers
(api/native_fields.py) are filled only for calls without the gateway mark."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
from google.protobuf import struct_pb2
from sqlalchemy import Engine

from loyalty_grpc.api.call_metadata import from_gateway
from loyalty_grpc.api.codes import deposit_codes_response, list_promos_response
from loyalty_grpc.api.context import current_caller
from loyalty_grpc.api.redeem import redeem_response
from loyalty_grpc.api.requests import fan_ref, new_sale
from loyalty_grpc.api.roster import query_of_get, query_of_post, roster_data
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pb_grpc
from loyalty_grpc.services.pos.ping import ping
from loyalty_grpc.services.pos.resolve import CurrentPromo, resolve_fan
from loyalty_grpc.services.pos.roster import read_roster
from loyalty_grpc.services.pos.sales import register_sale
from loyalty_grpc.store.folios import Folios


def _promo_detalle(promo: CurrentPromo) -> pb.PromoActual:
    """`promo_detalle` (native gRPC callers): the offered promotion as a message."""
    return pb.PromoActual(
        nombre=promo.nombre,
        descripcion=promo.descripcion,
        vigencia_fin=promo.vigencia_fin.isoformat(),
        codigo=promo.codigo,
    )


def _promo_value(promo: CurrentPromo | None) -> struct_pb2.Value:
    """The offered promotion as a JSON object, or JSON null (not an error)."""
    if promo is None:
        return struct_pb2.Value(null_value=struct_pb2.NULL_VALUE)
    value = struct_pb2.Value()
    value.struct_value.update(
        {
            "nombre": promo.nombre,
            "descripcion": promo.descripcion,
            "vigencia_fin": promo.vigencia_fin.isoformat(),
            "codigo": promo.codigo,
        }
    )
    return value


class PosServicer(pb_grpc.PosServiceServicer):
    """`folios`: the process's folios (store/folios.py), one per sale."""

    def __init__(self, engine: Engine, folios: Folios) -> None:
        self._engine = engine
        self._folios = folios

    def Ping(self, request: pb.PingRequest, context: grpc.ServicerContext) -> pb.PingResponse:
        result = ping(current_caller(), datetime.now(UTC))
        return pb.PingResponse(
            ok=True,
            data=pb.PingData(
                integracion=result.integracion,
                programa=result.programa,
                modo=result.modo,
                permisos=result.permisos,
                hora=result.hora,
            ),
        )

    def PingGet(
        self, request: pb.PingGetRequest, context: grpc.ServicerContext
    ) -> pb.PingGetResponse:
        result = ping(current_caller(), datetime.now(UTC))
        return pb.PingGetResponse(
            ok=True,
            data=pb.PingGetData(programa=result.programa, modo=result.modo, hora=result.hora),
        )

    def ResolveFan(
        self, request: pb.ResolveFanRequest, context: grpc.ServicerContext
    ) -> pb.ResolveFanResponse:
        caller = current_caller()
        found = resolve_fan(self._engine, caller, fan_ref(request), datetime.now(UTC))
        fan = found.fan
        sees_pii = caller.sees_personal_data
        typed = None if found.promo is None or from_gateway(context) else found.promo
        return pb.ResolveFanResponse(
            ok=True,
            data=pb.ResolveFanData(
                fan=pb.FanView(
                    id=fan.fan_id,
                    nombre=fan.nombre if sees_pii else None,
                    correo=fan.correo if sees_pii else None,
                    socio_desde=fan.socio_desde,
                    temporadas=fan.temporadas,
                    puntos=fan.puntos,
                ),
                promo=_promo_value(found.promo),
                promo_detalle=None if typed is None else _promo_detalle(typed),
            ),
        )

    def RegisterTx(
        self, request: pb.RegisterTxRequest, context: grpc.ServicerContext
    ) -> pb.RegisterTxResponse:
        caller = current_caller()
        result = register_sale(
            self._engine, self._folios, caller, new_sale(request, datetime.now(UTC))
        )
        return pb.RegisterTxResponse(
            ok=True,
            data=pb.RegisterTxData(
                duplicado=result.duplicado,
                tx=result.folio,
                puntos_otorgados=result.puntos_otorgados,
                saldo=result.saldo,
                fan=pb.TxFan(
                    id=result.fan_id,
                    correo=result.correo if caller.sees_personal_data else None,
                ),
                puntos_acreditados=result.puntos_acreditados,
            ),
        )

    def Redeem(self, request: pb.RedeemRequest, context: grpc.ServicerContext) -> pb.RedeemResponse:
        return redeem_response(
            self._engine,
            current_caller(),
            request,
            datetime.now(UTC),
            native=bool(request.codigos) and not from_gateway(context),
        )

    def ListPromos(
        self, request: pb.ListPromosRequest, context: grpc.ServicerContext
    ) -> pb.ListPromosResponse:
        return list_promos_response(self._engine, current_caller())

    def DepositCodes(
        self, request: pb.DepositCodesRequest, context: grpc.ServicerContext
    ) -> pb.DepositCodesResponse:
        return deposit_codes_response(self._engine, current_caller(), request)

    def Roster(self, request: pb.RosterRequest, context: grpc.ServicerContext) -> pb.RosterResponse:
        query = query_of_get(request)
        page = read_roster(self._engine, current_caller().programa_id, query.desde, query.limite)
        return pb.RosterResponse(ok=True, data=roster_data(page))

    def RosterPost(
        self, request: pb.RosterPostRequest, context: grpc.ServicerContext
    ) -> pb.RosterPostResponse:
        query = query_of_post(request)
        page = read_roster(self._engine, current_caller().programa_id, query.desde, query.limite)
        return pb.RosterPostResponse(ok=True, data=roster_data(page))
