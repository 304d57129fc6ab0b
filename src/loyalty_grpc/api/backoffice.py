"""BackofficeService: thin. Convert the request, run the use case in its own unit of work
(one transaction per RPC), convert the result; no try/except (the interceptor maps errors
and checks the admin token)."""

# Method names are the proto's RPC names (gRPC looks them up by name).

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message
from sqlalchemy import Engine

from loyalty_grpc.api.backoffice_values import (
    CODE_STATE,
    FAN_STATE,
    KEY_MODE,
    PROMO_STATE,
    timestamp,
)
from loyalty_grpc.domain import requests
from loyalty_grpc.domain.codes import PromoRef, code_batch_of_list
from loyalty_grpc.domain.programs import format_tasa, program_id
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as pb
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as pb_grpc
from loyalty_grpc.services.backoffice import codes, fans, keys, programs, promos
from loyalty_grpc.services.backoffice import points as points_admin
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.services.backoffice.requests import once
from loyalty_grpc.services.pos import codes as code_deposit
from loyalty_grpc.store.requests import RequestKey
from loyalty_grpc.store.uow import UnitOfWork, run_in_uow, snapshot

R = TypeVar("R", bound=Message)
# The writes applied once per request id (domain/requests.py).
_WithRequestId = pb.AdjustPointsRequest | pb.AssignNextCodeRequest


def _program(p: programs.Programa) -> pb.Program:
    return pb.Program(
        id=p.id,
        nombre=p.nombre,
        tasa_puntos=format_tasa(p.tasa_puntos),
        qr_url=p.qr_url,
        moneda=p.moneda,
    )


def _key(k: keys.ClaveInfo) -> pb.ApiKey:
    return pb.ApiKey(
        id=k.id,
        programa=k.programa,
        integracion=k.integracion,
        modo=KEY_MODE.number(k.modo),
        permisos=k.permisos,
        sufijo=k.sufijo,
        creada=timestamp(k.creada),
        revocada=timestamp(k.revocada),
    )


def _fan(f: fans.FanInfo) -> pb.FanRecord:
    return pb.FanRecord(
        programa=f.programa,
        id=f.fan_id,
        nombre=f.nombre,
        correo=f.correo,
        socio_desde=f.socio_desde,
        temporadas=f.temporadas,
        qr_token=f.qr_token,
        puntos=f.puntos,
        estado=FAN_STATE.number(f.estado),
        baja_en=timestamp(f.baja_en),
        baja_motivo=f.baja_motivo or "",
        actualizado=timestamp(f.actualizado),
    )


def _promo(p: promos.PromoInfo) -> pb.PromoRecord:
    return pb.PromoRecord(
        programa=p.programa,
        id=p.id,
        nombre=p.nombre,
        descripcion=p.descripcion,
        estado=PROMO_STATE.number(p.estado),
        vigencia_fin=p.vigencia_fin.isoformat(),
        puntos_canje=p.puntos_canje,
    )


def _code(c: codes.CodigoInfo) -> pb.CodeRecord:
    return pb.CodeRecord(
        promo_id=c.promo_id,
        codigo=c.codigo,
        estado=CODE_STATE.number(c.estado),
        fan=c.fan or "",
    )


def _ledger_entry(e: points_admin.LedgerEntryInfo) -> pb.LedgerEntry:
    return pb.LedgerEntry(
        id=e.id,
        puntos=e.puntos,
        motivo=e.motivo.value,
        venta=e.venta_id or 0,
        codigo=e.codigo or "",
        nota=e.nota,
        creado=timestamp(e.creado),
        saldo=e.saldo,
    )


def _sale(v: points_admin.SaleInfo) -> pb.Sale:
    return pb.Sale(
        folio=v.folio,
        id_externo=v.id_externo,
        modo=KEY_MODE.number(v.modo),
        fan=v.fan,
        importe_centavos=v.importe_centavos,
        moneda=v.moneda,
        terminal=v.terminal or "",
        sitio=v.sitio or "",
        ts=timestamp(v.ts),
        puntos=v.puntos,
        anulada=timestamp(v.anulada_en),
    )


class BackofficeServicer(pb_grpc.BackofficeServiceServicer):
    """`on_keys_changed` runs after a key is issued or revoked, or a program changes (the
    server clears its in-process key cache, which also holds each key's program name, rate
    and currency, so that the change takes effect at once in this process)."""

    def __init__(
        self, engine: Engine, *, on_keys_changed: Callable[[], None] | None = None
    ) -> None:
        self._engine = engine
        self._snapshot = snapshot(engine)
        self._on_keys_changed = on_keys_changed or (lambda: None)

    def ApplyFixture(
        self, request: pb.ApplyFixtureRequest, context: grpc.ServicerContext
    ) -> pb.ApplyFixtureResponse:
        counts = run_in_uow(self._engine, apply_fixture, request.fixture_json)
        self._on_keys_changed()
        return pb.ApplyFixtureResponse(
            counts=[
                pb.ApplyCount(
                    entidad=c.entidad,
                    creados=c.creados,
                    actualizados=c.actualizados,
                    sin_cambios=c.sin_cambios,
                )
                for c in counts
            ]
        )

    # -------------------------------------------------------------- programs

    def UpsertProgram(
        self, request: pb.UpsertProgramRequest, context: grpc.ServicerContext
    ) -> pb.UpsertProgramResponse:
        p = request.program
        result = run_in_uow(
            self._engine,
            programs.upsert_program,
            p.id,
            p.nombre,
            p.tasa_puntos,
            qr_url=p.qr_url,
            moneda=p.moneda,
        )
        self._on_keys_changed()  # an authenticated key carries its program's terms
        return pb.UpsertProgramResponse(program=_program(result.programa), creado=result.creado)

    def ListPrograms(
        self, request: pb.ListProgramsRequest, context: grpc.ServicerContext
    ) -> pb.ListProgramsResponse:
        return pb.ListProgramsResponse(
            programs=[_program(p) for p in run_in_uow(self._engine, programs.list_programs)]
        )

    # -------------------------------------------------------------- keys

    def IssueKey(
        self, request: pb.IssueKeyRequest, context: grpc.ServicerContext
    ) -> pb.IssueKeyResponse:
        issued = run_in_uow(
            self._engine,
            keys.issue_key,
            request.programa,
            request.integracion,
            KEY_MODE.text(request.modo),
            request.permisos,
        )
        self._on_keys_changed()
        return pb.IssueKeyResponse(key=_key(issued.info), clave=issued.clave)

    def ListKeys(
        self, request: pb.ListKeysRequest, context: grpc.ServicerContext
    ) -> pb.ListKeysResponse:
        return pb.ListKeysResponse(
            keys=[_key(k) for k in run_in_uow(self._engine, keys.list_keys, request.programa)]
        )

    def RevokeKey(
        self, request: pb.RevokeKeyRequest, context: grpc.ServicerContext
    ) -> pb.RevokeKeyResponse:
        revoked = run_in_uow(self._engine, keys.revoke_key, request.id)
        self._on_keys_changed()
        return pb.RevokeKeyResponse(key=_key(revoked))

    # -------------------------------------------------------------- fans

    def RegisterFan(
        self, request: pb.RegisterFanRequest, context: grpc.ServicerContext
    ) -> pb.RegisterFanResponse:
        fan = run_in_uow(
            self._engine,
            fans.register_fan,
            request.programa,
            request.id,
            nombre=request.nombre,
            correo=request.correo,
            socio_desde=request.socio_desde,
            temporadas=request.temporadas,
            qr_token=request.qr_token,
        )
        return pb.RegisterFanResponse(fan=_fan(fan))

    def UpdateFan(
        self, request: pb.UpdateFanRequest, context: grpc.ServicerContext
    ) -> pb.UpdateFanResponse:
        fan = run_in_uow(
            self._engine, fans.update_fan, request.programa, request.id, **_changes(request)
        )
        return pb.UpdateFanResponse(fan=_fan(fan))

    def GetFan(self, request: pb.GetFanRequest, context: grpc.ServicerContext) -> pb.GetFanResponse:
        return pb.GetFanResponse(
            fan=_fan(run_in_uow(self._engine, fans.get_fan, request.programa, request.id))
        )

    def DeactivateFan(
        self, request: pb.DeactivateFanRequest, context: grpc.ServicerContext
    ) -> pb.DeactivateFanResponse:
        fan = run_in_uow(
            self._engine, fans.deactivate_fan, request.programa, request.id, request.motivo
        )
        return pb.DeactivateFanResponse(fan=_fan(fan))

    def ReactivateFan(
        self, request: pb.ReactivateFanRequest, context: grpc.ServicerContext
    ) -> pb.ReactivateFanResponse:
        fan = run_in_uow(self._engine, fans.reactivate_fan, request.programa, request.id)
        return pb.ReactivateFanResponse(fan=_fan(fan))

    # -------------------------------------------------------------- promotions

    def CreatePromo(
        self, request: pb.CreatePromoRequest, context: grpc.ServicerContext
    ) -> pb.CreatePromoResponse:
        promo = run_in_uow(
            self._engine,
            promos.create_promo,
            request.programa,
            request.nombre,
            vigencia_fin=request.vigencia_fin,
            descripcion=request.descripcion,
            estado=PROMO_STATE.text(request.estado),
            puntos_canje=request.puntos_canje,
        )
        return pb.CreatePromoResponse(promo=_promo(promo))

    def UpdatePromo(
        self, request: pb.UpdatePromoRequest, context: grpc.ServicerContext
    ) -> pb.UpdatePromoResponse:
        changes = _changes(request)
        if changes["estado"] is not None:
            changes["estado"] = PROMO_STATE.text(changes["estado"])
        promo = run_in_uow(
            self._engine, promos.update_promo, request.programa, request.id, **changes
        )
        return pb.UpdatePromoResponse(promo=_promo(promo))

    # -------------------------------------------------------------- codes

    def AssignCode(
        self, request: pb.AssignCodeRequest, context: grpc.ServicerContext
    ) -> pb.AssignCodeResponse:
        code = run_in_uow(
            self._engine,
            codes.assign_code,
            request.programa,
            request.promo_id,
            request.codigo,
            request.fan,
        )
        return pb.AssignCodeResponse(code=_code(code))

    def ReleaseCode(
        self, request: pb.ReleaseCodeRequest, context: grpc.ServicerContext
    ) -> pb.ReleaseCodeResponse:
        code = run_in_uow(
            self._engine, codes.release_code, request.programa, request.promo_id, request.codigo
        )
        return pb.ReleaseCodeResponse(code=_code(code))

    def AssignNextCode(
        self, request: pb.AssignNextCodeRequest, context: grpc.ServicerContext
    ) -> pb.AssignNextCodeResponse:
        def assign(uow: UnitOfWork) -> pb.AssignNextCodeResponse:
            code = codes.assign_next_code(uow, request.programa, request.promo_id, request.fan)
            return pb.AssignNextCodeResponse(code=_code(code))

        return self._once(request, pb.AssignNextCodeResponse, assign)

    def ImportCodes(
        self, request: pb.ImportCodesRequest, context: grpc.ServicerContext
    ) -> pb.ImportCodesResponse:
        result = code_deposit.deposit_codes(
            self._engine,
            request.programa,
            PromoRef(id=request.promo_id, nombre=None),
            code_batch_of_list(request.codigos),
            campo="promo_id",
        )
        return pb.ImportCodesResponse(
            recibidos=result.recibidos, agregados=result.agregados, duplicados=result.duplicados
        )

    # -------------------------------------------------------------- points (support desk)

    def GetLedger(
        self, request: pb.GetLedgerRequest, context: grpc.ServicerContext
    ) -> pb.GetLedgerResponse:
        fan, entries = run_in_uow(
            self._snapshot, points_admin.get_ledger, request.programa, request.fan
        )
        return pb.GetLedgerResponse(fan=_fan(fan), entries=[_ledger_entry(e) for e in entries])

    def AdjustPoints(
        self, request: pb.AdjustPointsRequest, context: grpc.ServicerContext
    ) -> pb.AdjustPointsResponse:
        def adjust(uow: UnitOfWork) -> pb.AdjustPointsResponse:
            entry = points_admin.adjust_points(
                uow, request.programa, request.fan, request.puntos, request.motivo
            )
            return pb.AdjustPointsResponse(entry=_ledger_entry(entry))

        return self._once(request, pb.AdjustPointsResponse, adjust)

    def VoidSale(
        self, request: pb.VoidSaleRequest, context: grpc.ServicerContext
    ) -> pb.VoidSaleResponse:
        result = run_in_uow(
            self._engine, points_admin.void_sale, request.programa, request.folio, request.motivo
        )
        return pb.VoidSaleResponse(
            sale=_sale(result.sale), revertidos=result.revertidos, ya_anulada=result.ya_anulada
        )

    def _once(self, request: _WithRequestId, kind: type[R], write: Callable[[UnitOfWork], R]) -> R:
        """`write` in its own unit of work, applied once per request id when the request
        has one (domain/requests.py): a retry is answered the first answer again."""
        request_id = requests.request_id(request.request_id)
        if request_id is None:
            return run_in_uow(self._engine, write)
        metodo = type(request).__name__.removesuffix("Request")
        key = RequestKey(program_id(request.programa), metodo, request_id)
        # The request's SHA-256 without its id: what a retry must repeat.
        unsent: Message = type(request).FromString(request.SerializeToString())
        unsent.ClearField("request_id")
        huella = hashlib.sha256(unsent.SerializeToString(deterministic=True)).digest()
        answer = run_in_uow(
            self._engine, once, key, huella, lambda uow: write(uow).SerializeToString()
        )
        return kind.FromString(answer)


def _changes(request: Message) -> dict[str, Any]:
    """An Update request's `optional` fields (the proto says which) as keyword arguments:
    the value when the client set it, else None (leave unchanged)."""
    return {
        field.name: getattr(request, field.name) if request.HasField(field.name) else None
        for field in request.DESCRIPTOR.fields
        if field.has_presence
    }
