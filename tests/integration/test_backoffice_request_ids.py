"""The back office's writes that are not idempotent by nature, applied once per request id
(issue 26 §5, AIP-155; domain/requests.py): AdjustPoints and AssignNextCode over a real gRPC
channel. A retry with the same id and request answers the first answer again and changes
nothing, also when the two race each other; the same id with another request is
request_id_en_conflicto; a call without an id is applied each time; and `loyalty admin`
sends one and names it when the answer is lost."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from sqlalchemy import Engine, func, select

from loyalty_grpc.api.server import GrpcServer
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as pb
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as pb_grpc
from loyalty_grpc.services.backoffice import codes, fans, programs, promos
from loyalty_grpc.store.tables import codigos, movimientos, peticiones
from loyalty_grpc.store.uow import run_in_uow
from tests.support import ADMIN_TOKEN, run_together
from tests.support import cli_failed as failed
from tests.support import cli_ok as ok

P = "reqs"
FAN = "REQ01"


@pytest.fixture(scope="module")
def promo_id(server: GrpcServer, engine: Engine) -> int:
    run_in_uow(engine, programs.upsert_program, P, "Club Reqs", "1")
    run_in_uow(
        engine,
        fans.register_fan,
        P,
        FAN,
        nombre="Ana",
        correo="req01@example.com",
        socio_desde=2020,
    )
    promo = run_in_uow(engine, promos.create_promo, P, "Vales", vigencia_fin="2099-12-31")
    with engine.begin() as conn:
        conn.execute(
            codigos.insert(),
            [{"promo_id": promo.id, "programa_id": P, "codigo": f"V-{i:03}"} for i in range(1, 41)],
        )
    return int(promo.id)


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> pb_grpc.BackofficeServiceStub:
    return pb_grpc.BackofficeServiceStub(channel)


@pytest.fixture(scope="module")
def md() -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {ADMIN_TOKEN}"),)


def _entries(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(movimientos)).scalar_one())


def _assigned(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count())
                .select_from(codigos)
                .where(codigos.c.programa_id == P, codigos.c.estado == "asignado")
            ).scalar_one()
        )


def _reason(exc: grpc.RpcError) -> str:
    status = rpc_status.from_call(exc)  # type: ignore[arg-type]
    assert status is not None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return str(info.reason)
    raise AssertionError("no ErrorInfo")


def test_adjust_points_retried_is_applied_once(stub, md, engine: Engine, promo_id: int) -> None:
    request = pb.AdjustPointsRequest(
        programa=P, fan=FAN, puntos=30, motivo="regalo", request_id=str(uuid.uuid4())
    )
    before = _entries(engine)
    first = stub.AdjustPoints(request, metadata=md)
    again = stub.AdjustPoints(request, metadata=md)
    assert again == first  # the first answer, byte for byte: the same entry and saldo
    assert _entries(engine) == before + 1


def test_the_same_id_with_another_request_is_refused(stub, md, engine: Engine, promo_id: int):
    request_id = str(uuid.uuid4())
    stub.AdjustPoints(
        pb.AdjustPointsRequest(programa=P, fan=FAN, puntos=5, motivo="a", request_id=request_id),
        metadata=md,
    )
    before = _entries(engine)
    with pytest.raises(grpc.RpcError) as refused:
        stub.AdjustPoints(
            pb.AdjustPointsRequest(
                programa=P, fan=FAN, puntos=6, motivo="a", request_id=request_id
            ),
            metadata=md,
        )
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert _reason(refused.value) == "request_id_en_conflicto"
    assert request_id in (refused.value.details() or "")
    assert _entries(engine) == before
    # The same id on another method is another request.
    stub.AssignNextCode(
        pb.AssignNextCodeRequest(programa=P, promo_id=promo_id, fan=FAN, request_id=request_id),
        metadata=md,
    )


def test_without_a_request_id_each_call_is_applied(stub, md, engine: Engine, promo_id: int):
    request = pb.AdjustPointsRequest(programa=P, fan=FAN, puntos=1, motivo="sin id")
    before = _entries(engine)
    stub.AdjustPoints(request, metadata=md)
    stub.AdjustPoints(request, metadata=md)
    assert _entries(engine) == before + 2


def test_a_failed_write_keeps_no_request_id(stub, md, engine: Engine, promo_id: int) -> None:
    request_id = str(uuid.uuid4())
    overdraw = pb.AdjustPointsRequest(
        programa=P, fan=FAN, puntos=-(10**9), motivo="x", request_id=request_id
    )
    with pytest.raises(grpc.RpcError) as refused:
        stub.AdjustPoints(overdraw, metadata=md)
    assert _reason(refused.value) == "solicitud_invalida"
    with engine.connect() as conn:
        kept = conn.execute(
            select(func.count())
            .select_from(peticiones)
            .where(peticiones.c.request_id == request_id)
        ).scalar_one()
    assert kept == 0  # rolled back with the write: the id can be used for a valid request
    stub.AdjustPoints(
        pb.AdjustPointsRequest(programa=P, fan=FAN, puntos=2, motivo="x", request_id=request_id),
        metadata=md,
    )


@pytest.mark.parametrize("bad", ["-x", "a b", "ñ", "x" * 65])
def test_a_malformed_request_id_is_refused(stub, md, engine: Engine, promo_id: int, bad: str):
    before = _entries(engine)
    with pytest.raises(grpc.RpcError) as refused:
        stub.AdjustPoints(
            pb.AdjustPointsRequest(programa=P, fan=FAN, puntos=1, motivo="x", request_id=bad),
            metadata=md,
        )
    assert _reason(refused.value) == "solicitud_invalida"
    assert "request_id" in (refused.value.details() or "")
    assert _entries(engine) == before


@pytest.mark.parametrize("method", ["AdjustPoints", "AssignNextCode"])
def test_identical_concurrent_calls_are_applied_once(
    stub, md, engine: Engine, promo_id: int, method: str
) -> None:
    request_id = str(uuid.uuid4())
    call: Callable[[], Any]
    if method == "AdjustPoints":
        request = pb.AdjustPointsRequest(
            programa=P, fan=FAN, puntos=7, motivo="carrera", request_id=request_id
        )
        call = lambda: stub.AdjustPoints(request, metadata=md)  # noqa: E731
        count = _entries
    else:
        next_code = pb.AssignNextCodeRequest(
            programa=P, promo_id=promo_id, fan=FAN, request_id=request_id
        )
        call = lambda: stub.AssignNextCode(next_code, metadata=md)  # noqa: E731
        count = _assigned
    before = count(engine)
    answers = run_together([call] * 8)
    assert all(answer == answers[0] for answer in answers)
    assert count(engine) == before + 1


def test_assign_next_code_retried_delivers_one_code(stub, md, engine: Engine, promo_id: int):
    request = pb.AssignNextCodeRequest(
        programa=P, promo_id=promo_id, fan=FAN, request_id=str(uuid.uuid4())
    )
    before = _assigned(engine)
    first = stub.AssignNextCode(request, metadata=md)
    assert stub.AssignNextCode(request, metadata=md).code == first.code
    assert _assigned(engine) == before + 1
    assert run_in_uow(engine, codes.assign_next_code, P, promo_id, FAN).codigo != first.code.codigo


def test_the_cli_sends_a_request_id_and_takes_one(admin_cli, engine: Engine, promo_id: int):
    before = _entries(engine)
    argv = ["points", "adjust", FAN, "-p", P, "--puntos", "4", "--motivo", "cli"]
    ok(admin_cli(*argv, "--request-id", "op-2026-11-27-1"))
    ok(admin_cli(*argv, "--request-id", "op-2026-11-27-1"))  # the operator's retry
    assert _entries(engine) == before + 1
    ok(admin_cli(*argv))  # a new id each run: applied again
    assert _entries(engine) == before + 2
    failed(
        admin_cli(*argv[:-1], "otro", "--request-id", "op-2026-11-27-1"), "request_id_en_conflicto"
    )


def test_the_cli_names_the_id_when_the_answer_is_lost(admin_cli, promo_id: int) -> None:
    # Nothing listens on this port: the outcome is unknown to the operator.
    code, _, err = admin_cli(
        "points", "adjust", FAN, "-p", P, "--puntos", "4", "--motivo", "x",
        "--request-id", "lost-1",
        target="127.0.0.1:9",
    )  # fmt: skip
    assert code == 1
    assert "servicio_no_disponible" in err
    assert "--request-id lost-1" in err
