"""The sub-commands: each builds its request from the parsed arguments and calls
BackofficeService (a `Call`)."""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from loyalty_grpc.api.backoffice_values import KEY_MODE, PROMO_STATE
from loyalty_grpc.domain.errors import CodigoError
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as pb
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as pb_grpc

DEFAULT_TIMEOUT_SECONDS = 60.0

Metadata = tuple[tuple[str, str], ...]
Stub = pb_grpc.BackofficeServiceStub
# One sub-command: (stub, parsed arguments, timeout, metadata) -> the response.
Call = Callable[[Stub, argparse.Namespace, float, Metadata], Message]


class CommandStoppedError(Exception):
    """A command failed part-way or with its outcome unknown; `detalle` says what is done
    and how to go on."""

    def __init__(self, codigo: str, detalle: str) -> None:
        super().__init__(f"{codigo}: {detalle}")
        self.codigo = codigo
        self.detalle = detalle


def _once(a: argparse.Namespace, call: Callable[[str], Message]) -> Message:
    """A write the server applies once per request id (domain/requests.py): `--request-id`,
    else a new UUID. When its answer is lost (the server unreachable, the deadline passed)
    nobody knows whether it was applied: the error gives the id to retry it with."""
    request_id = a.request_id or str(uuid.uuid4())
    try:
        return call(request_id)
    except grpc.RpcError as exc:
        codigo, detalle = error_of(exc)
        if codigo != CodigoError.SERVICIO_NO_DISPONIBLE.value:
            raise
        raise CommandStoppedError(
            codigo,
            f"{detalle}; the change may or may not have been made: run the same command "
            f"again with --request-id {request_id} to make it at most once",
        ) from exc


def apply(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    text = sys.stdin.read() if a.file == "-" else Path(a.file).read_text(encoding="utf-8")
    return stub.ApplyFixture(pb.ApplyFixtureRequest(fixture_json=text), timeout=t, metadata=md)


def upsert_program(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    program = pb.Program(
        id=a.id, nombre=a.nombre, tasa_puntos=a.tasa, qr_url=a.qr_url, moneda=a.moneda
    )
    return stub.UpsertProgram(pb.UpsertProgramRequest(program=program), timeout=t, metadata=md)


def list_programs(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.ListPrograms(pb.ListProgramsRequest(), timeout=t, metadata=md)


def issue_key(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    permisos = [n for item in a.permisos for n in item.replace(",", " ").split()]
    return stub.IssueKey(
        pb.IssueKeyRequest(
            programa=a.programa,
            integracion=a.integracion,
            modo=KEY_MODE.number(a.modo),
            permisos=permisos,
        ),
        timeout=t,
        metadata=md,
    )


def list_keys(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.ListKeys(pb.ListKeysRequest(programa=a.programa), timeout=t, metadata=md)


def revoke_key(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.RevokeKey(pb.RevokeKeyRequest(id=a.id), timeout=t, metadata=md)


def register_fan(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.RegisterFan(
        pb.RegisterFanRequest(
            programa=a.programa,
            id=a.id,
            nombre=a.nombre,
            correo=a.correo,
            socio_desde=a.socio_desde,
            temporadas=a.temporadas,
            qr_token=a.qr_token,
        ),
        timeout=t,
        metadata=md,
    )


def _given(a: argparse.Namespace, *names: str) -> dict[str, object]:
    """The optional fields the user gave (so that only those change)."""
    return {n: getattr(a, n) for n in names if getattr(a, n) is not None}


def update_fan(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    fields = _given(a, "nombre", "correo", "socio_desde", "temporadas", "qr_token")
    return stub.UpdateFan(
        pb.UpdateFanRequest(programa=a.programa, id=a.id, **fields),  # type: ignore[arg-type]
        timeout=t,
        metadata=md,
    )


def get_fan(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.GetFan(pb.GetFanRequest(programa=a.programa, id=a.id), timeout=t, metadata=md)


def deactivate_fan(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.DeactivateFan(
        pb.DeactivateFanRequest(programa=a.programa, id=a.id, motivo=a.motivo),
        timeout=t,
        metadata=md,
    )


def reactivate_fan(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.ReactivateFan(
        pb.ReactivateFanRequest(programa=a.programa, id=a.id), timeout=t, metadata=md
    )


def create_promo(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.CreatePromo(
        pb.CreatePromoRequest(
            programa=a.programa,
            nombre=a.nombre,
            descripcion=a.descripcion,
            estado=PROMO_STATE.number(a.estado),
            vigencia_fin=a.vigencia_fin,
            puntos_canje=a.puntos_canje,
        ),
        timeout=t,
        metadata=md,
    )


def update_promo(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    fields = _given(a, "estado", "vigencia_fin", "puntos_canje", "descripcion")
    if "estado" in fields:
        fields["estado"] = PROMO_STATE.number(a.estado)
    return stub.UpdatePromo(
        pb.UpdatePromoRequest(programa=a.programa, id=a.id, **fields),  # type: ignore[arg-type]
        timeout=t,
        metadata=md,
    )


def assign_code(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.AssignCode(
        pb.AssignCodeRequest(programa=a.programa, promo_id=a.promo, codigo=a.codigo, fan=a.fan),
        timeout=t,
        metadata=md,
    )


def release_code(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.ReleaseCode(
        pb.ReleaseCodeRequest(programa=a.programa, promo_id=a.promo, codigo=a.codigo),
        timeout=t,
        metadata=md,
    )


def get_ledger(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.GetLedger(
        pb.GetLedgerRequest(programa=a.programa, fan=a.id), timeout=t, metadata=md
    )


def adjust_points(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return _once(
        a,
        lambda request_id: stub.AdjustPoints(
            pb.AdjustPointsRequest(
                programa=a.programa,
                fan=a.id,
                puntos=a.puntos,
                motivo=a.motivo,
                request_id=request_id,
            ),
            timeout=t,
            metadata=md,
        ),
    )


def void_sale(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.VoidSale(
        pb.VoidSaleRequest(programa=a.programa, folio=a.folio, motivo=a.motivo),
        timeout=t,
        metadata=md,
    )


def assign_next_code(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return _once(
        a,
        lambda request_id: stub.AssignNextCode(
            pb.AssignNextCodeRequest(
                programa=a.programa, promo_id=a.promo, fan=a.fan, request_id=request_id
            ),
            timeout=t,
            metadata=md,
        ),
    )


# Transport failures without ErrorInfo (the server was never reached...).
_TRANSPORT: dict[grpc.StatusCode, CodigoError] = {
    grpc.StatusCode.UNAVAILABLE: CodigoError.SERVICIO_NO_DISPONIBLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: CodigoError.SERVICIO_NO_DISPONIBLE,
    grpc.StatusCode.UNAUTHENTICATED: CodigoError.NO_AUTENTICADO,
    grpc.StatusCode.UNIMPLEMENTED: CodigoError.NO_IMPLEMENTADO,
}


def error_of(exc: grpc.RpcError) -> tuple[str, str]:
    """(codigo, detalle) of a failed call: the codigo is google.rpc.ErrorInfo's reason;
    without one (the server was never reached…) it follows the gRPC status code."""
    # A stub's RpcError is also a grpc.Call (code, details, trailing metadata).
    call: grpc.Call = exc  # type: ignore[assignment]
    detalle = call.details() or call.code().name
    status = rpc_status.from_call(call)
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                return info.reason, detalle
    return _TRANSPORT.get(call.code(), CodigoError.ERROR_INTERNO).value, detalle
