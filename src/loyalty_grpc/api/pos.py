"""PosService: thin. Convert the request, call the use case, convert the result; no
try/except (the interceptor maps errors)."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
from sqlalchemy import Engine

from loyalty_grpc.api.context import current_caller
from loyalty_grpc.domain.errors import Codigo, LoyaltyError
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pb_grpc
from loyalty_grpc.services.ping import ping


def _not_yet(operation: str) -> LoyaltyError:
    return LoyaltyError(Codigo.NO_IMPLEMENTADO,
                        f"{operation} está en el contrato pero este servidor aún no lo atiende")


class PosServicer(pb_grpc.PosServiceServicer):
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def Ping(self, request: pb.PingRequest, context: grpc.ServicerContext) -> pb.PingResponse:
        result = ping(current_caller(), datetime.now(UTC))
        return pb.PingResponse(ok=True, data=pb.PingData(
            integracion=result.integracion, programa=result.programa, modo=result.modo,
            permisos=result.permisos, hora=result.hora))

    def PingGet(self, request: pb.PingGetRequest, context: grpc.ServicerContext
                ) -> pb.PingGetResponse:
        result = ping(current_caller(), datetime.now(UTC))
        return pb.PingGetResponse(ok=True, data=pb.PingGetData(
            programa=result.programa, modo=result.modo, hora=result.hora))

    def ResolveFan(self, request: pb.ResolveFanRequest, context: grpc.ServicerContext
                   ) -> pb.ResolveFanResponse:
        raise _not_yet("fan/resolve")

    def RegisterTx(self, request: pb.RegisterTxRequest, context: grpc.ServicerContext
                   ) -> pb.RegisterTxResponse:
        raise _not_yet("tx")

    def Redeem(self, request: pb.RedeemRequest, context: grpc.ServicerContext
               ) -> pb.RedeemResponse:
        raise _not_yet("redeem")

    def ListPromos(self, request: pb.ListPromosRequest, context: grpc.ServicerContext
                   ) -> pb.ListPromosResponse:
        raise _not_yet("promos")

    def DepositCodes(self, request: pb.DepositCodesRequest, context: grpc.ServicerContext
                     ) -> pb.DepositCodesResponse:
        raise _not_yet("codes")

    def Roster(self, request: pb.RosterRequest, context: grpc.ServicerContext
               ) -> pb.RosterResponse:
        raise _not_yet("roster")

    def RosterPost(self, request: pb.RosterPostRequest, context: grpc.ServicerContext
                   ) -> pb.RosterPostResponse:
        raise _not_yet("roster")
