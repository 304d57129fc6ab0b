"""The gRPC server over real channels on a real PostgreSQL: health, reflection (v1 and
v1alpha), the edge
interceptor (keys, modes, permissions, admin token), error mapping, graceful stop."""

from __future__ import annotations

import json
import threading
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from sqlalchemy import Engine, text

from loyalty_grpc.api.gateway_protocol import GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE
from loyalty_grpc.api.server import ServerSettings, build_server
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as bo
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as bo_grpc
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pos
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pos_grpc
from tests.support import ADMIN_TOKEN, Admin, error_info

ALL = ["fan:leer", "tx:escribir", "redeem:escribir", "codigos:escribir", "roster:leer"]


@pytest.fixture(scope="module")
def server_settings() -> dict[str, Any]:
    return {"max_workers": 8, "rate_limit_per_minute": 1_000_000}


@pytest.fixture(scope="module")
def admin(channel: grpc.Channel) -> Admin:
    a = Admin(bo_grpc.BackofficeServiceStub(channel), ADMIN_TOKEN)
    a.program("grpc", "Club gRPC")
    return a


@pytest.fixture(scope="module")
def pos_stub(channel: grpc.Channel) -> pos_grpc.PosServiceStub:
    return pos_grpc.PosServiceStub(channel)


def bearer(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


def fail(call, request, metadata=()) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call(request, metadata=metadata)
    return caught.value


def test_health_serving(channel):
    stub = health_pb2_grpc.HealthStub(channel)
    for service in ["", "loyalty.v1.PosService", "loyalty.v1.BackofficeService"]:
        reply = stub.Check(health_pb2.HealthCheckRequest(service=service))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_services(channel):
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    names = {s.name for s in next(replies).list_services_response.service}
    assert {"loyalty.v1.PosService", "loyalty.v1.BackofficeService"} <= names


def _reflect_v1(
    channel: grpc.Channel, request: reflection_pb2.ServerReflectionRequest
) -> reflection_pb2.ServerReflectionResponse:
    """One exchange with reflection v1, as a v1-only client makes it: the v1 method path
    (a v1 message is the same bytes as its v1alpha twin: same fields, same numbers)."""
    call = channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    response: reflection_pb2.ServerReflectionResponse = next(iter(call(iter([request]))))
    return response


def test_reflection_v1_lists_and_describes_services(channel):
    listed = _reflect_v1(channel, reflection_pb2.ServerReflectionRequest(list_services=""))
    names = {s.name for s in listed.list_services_response.service}
    assert {
        "loyalty.v1.PosService",
        "loyalty.v1.BackofficeService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= names
    # Each service is described, the reflection service v1 itself included, and the files
    # build in a fresh pool (what a client does with them).
    for symbol, package in [
        ("loyalty.v1.PosService", "loyalty.v1"),
        ("grpc.reflection.v1.ServerReflection", "grpc.reflection.v1"),
    ]:
        reply = _reflect_v1(
            channel, reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol)
        )
        assert reply.WhichOneof("message_response") == "file_descriptor_response", symbol
        files = [
            descriptor_pb2.FileDescriptorProto.FromString(raw)
            for raw in reply.file_descriptor_response.file_descriptor_proto
        ]
        assert files[0].package == package
        pool = descriptor_pool.DescriptorPool()
        for file in reversed(files):  # dependencies follow the file that needs them
            pool.Add(file)
        service = pool.FindServiceByName(symbol)
        assert service.methods
    v1 = pool.FindMessageTypeByName("grpc.reflection.v1.ServerReflectionRequest")
    alpha = reflection_pb2.ServerReflectionRequest.DESCRIPTOR
    assert [(f.name, f.number) for f in v1.fields] == [(f.name, f.number) for f in alpha.fields]


def test_ping_with_live_and_test_keys(admin, pos_stub):
    _, live = admin.key("grpc", "Caja Norte", ["tx:escribir", "fan:leer"])
    _, test = admin.key("grpc", "Caja Pruebas", [], modo="prueba")
    reply = pos_stub.Ping(pos.PingRequest(), metadata=bearer(live))
    assert reply.ok
    assert reply.data.integracion == "Caja Norte"
    assert reply.data.programa == "Club gRPC"
    assert reply.data.modo == "vivo"
    assert list(reply.data.permisos) == ["fan:leer", "tx:escribir"]  # the contract's order
    assert reply.data.hora.endswith("Z")
    reply_get = pos_stub.PingGet(pos.PingGetRequest(), metadata=bearer(test))
    assert (reply_get.data.programa, reply_get.data.modo) == ("Club gRPC", "prueba")


@pytest.mark.parametrize(
    ("metadata", "codigo"),
    [
        ((), "no_autenticado"),
        ((("authorization", "Basic dXNlcjpwYXNz"),), "no_autenticado"),
        ((("authorization", "Bearer"),), "no_autenticado"),
        ((("authorization", "Bearer lp_vivo_" + "x" * 30),), "clave_invalida"),
        ((("authorization", "Bearer not-a-key"),), "clave_invalida"),
    ],
)
def test_authentication_errors(pos_stub, metadata, codigo):
    error = fail(pos_stub.Ping, pos.PingRequest(), metadata)
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    info = error_info(error)
    assert (info.reason, info.domain) == (codigo, "loyalty.v1")
    assert info.metadata["http_status"] == "401"


def test_revoked_key_is_refused(admin, pos_stub):
    key_id, key = admin.key("grpc", "Caja Temporal", [])
    pos_stub.Ping(pos.PingRequest(), metadata=bearer(key))
    admin.revoke(key_id)
    error = fail(pos_stub.Ping, pos.PingRequest(), bearer(key))
    assert error_info(error).reason == "clave_invalida"


def test_permission_denied_then_the_operation(admin, pos_stub):
    _, ping_only = admin.key("grpc", "Kiosko", [])
    _, all_perms = admin.key("grpc", "Todo", ALL)
    error = fail(pos_stub.ResolveFan, pos.ResolveFanRequest(fan="X"), bearer(ping_only))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error_info(error).reason == "permiso_denegado"
    assert "fan:leer" in (error.details() or "")
    error = fail(pos_stub.ResolveFan, pos.ResolveFanRequest(fan="X"), bearer(all_perms))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error_info(error).reason == "fan_no_encontrado"
    assert pos_stub.ListPromos(pos.ListPromosRequest(), metadata=bearer(all_perms)).ok


def test_error_carries_http_envelope_metadata_for_the_gateway(pos_stub):
    # Only with the gateway mark (Envoy's): tests/integration/test_error_metadata.py.
    error = fail(pos_stub.Ping, pos.PingRequest(), ((GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE),))
    trailing = {m.key: str(m.value) for m in error.trailing_metadata()}
    assert trailing["x-http-status"] == "401"
    body = trailing["x-envelope"]
    assert body.isascii()
    assert body.startswith('{"ok":false,"error":{"codigo":"no_autenticado"')
    assert json.loads(body)["error"]["mensaje"] == "Falta la clave de API."


def test_backoffice_requires_admin_token(channel):
    stub = bo_grpc.BackofficeServiceStub(channel)
    error = fail(stub.ListPrograms, bo.ListProgramsRequest())
    assert error_info(error).reason == "no_autenticado"
    error = fail(stub.ListPrograms, bo.ListProgramsRequest(), bearer("wrong-token"))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error_info(error).reason == "clave_invalida"


def test_pos_key_does_not_open_backoffice(admin, channel):
    _, key = admin.key("grpc", "Caja", ALL)
    stub = bo_grpc.BackofficeServiceStub(channel)
    error = fail(stub.ListPrograms, bo.ListProgramsRequest(), bearer(key))
    assert error_info(error).reason == "clave_invalida"


def test_database_down_is_service_unavailable():
    srv = build_server(
        ServerSettings(
            database_url="postgresql://postgres@/nodb?host=/nonexistent-socket-dir",
            admin_token=ADMIN_TOKEN,
            port=0,
            key_cache_seconds=0,
        )
    )
    srv.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{srv.port}") as ch:
            error = fail(
                pos_grpc.PosServiceStub(ch).Ping, pos.PingRequest(), bearer("lp_vivo_" + "a" * 30)
            )
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert error_info(error).reason == "servicio_no_disponible"
    finally:
        srv.stop()


def test_graceful_stop_finishes_in_flight_calls(db_url: str, engine: Engine):
    """SIGTERM path: health says NOT_SERVING while the drain lasts, the in-flight call
    (blocked on a row lock) still completes, then the server is gone."""
    srv = build_server(
        ServerSettings(
            database_url=db_url,
            admin_token=ADMIN_TOKEN,
            port=0,
            key_cache_seconds=0,
            drain_seconds=1.0,
            grace_seconds=10,
        )
    )
    srv.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{srv.port}")
    admin = Admin(bo_grpc.BackofficeServiceStub(channel), ADMIN_TOKEN)
    admin.program("lento", "Club Lento")
    locker = engine.connect()
    locker.begin()
    locker.execute(text("SELECT 1 FROM programas WHERE id = 'lento' FOR UPDATE"))
    try:
        in_flight = admin.stub.UpsertProgram.future(
            bo.UpsertProgramRequest(
                program=bo.Program(id="lento", nombre="Club Lento 2", tasa_puntos="0.2")
            ),
            metadata=admin.md,
        )
        stopper = threading.Thread(target=srv.stop)
        stopper.start()
        health = health_pb2_grpc.HealthStub(channel)
        status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status
        assert status == health_pb2.HealthCheckResponse.NOT_SERVING
        assert not in_flight.done()
    finally:
        locker.rollback()
        locker.close()
    assert in_flight.result(timeout=10).program.nombre == "Club Lento 2"
    stopper.join(timeout=15)
    assert not stopper.is_alive()
    with pytest.raises(grpc.RpcError):
        health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
    channel.close()


def test_backoffice_states_modes_and_times(admin):
    """Enums for states and modes (UNSPECIFIED = not given), Timestamps for times (unset =
    none); a date stays YYYY-MM-DD text."""
    stub, md = admin.stub, admin.md
    error = fail(
        stub.IssueKey,
        bo.IssueKeyRequest(programa="grpc", integracion="Caja Sin Modo"),
        md,
    )
    assert error_info(error).reason == "campo_requerido"
    key = stub.IssueKey(
        bo.IssueKeyRequest(programa="grpc", integracion="Caja Prueba", modo=bo.KEY_MODE_PRUEBA),
        metadata=md,
    ).key
    assert key.modo == bo.KEY_MODE_PRUEBA
    assert key.HasField("creada")
    assert not key.HasField("revocada")
    revoked = stub.RevokeKey(bo.RevokeKeyRequest(id=key.id), metadata=md).key
    assert revoked.revocada.ToDatetime() >= revoked.creada.ToDatetime()

    fan = stub.RegisterFan(
        bo.RegisterFanRequest(
            programa="grpc", id="ENUM1", nombre="Ana", correo="e1@x.mx", socio_desde=2020
        ),
        metadata=md,
    ).fan
    assert fan.estado == bo.FAN_STATE_ACTIVO
    assert fan.HasField("actualizado")
    assert not fan.HasField("baja_en")
    fan = stub.DeactivateFan(
        bo.DeactivateFanRequest(programa="grpc", id="ENUM1", motivo="pide"), metadata=md
    ).fan
    assert (fan.estado, fan.HasField("baja_en")) == (bo.FAN_STATE_BAJA, True)

    promo = stub.CreatePromo(
        bo.CreatePromoRequest(programa="grpc", nombre="Enum", vigencia_fin="2099-12-31"),
        metadata=md,
    ).promo
    assert (promo.estado, promo.vigencia_fin) == (bo.PROMO_STATE_ACTIVA, "2099-12-31")
    update = bo.UpdatePromoRequest(programa="grpc", id=promo.id, estado=bo.PROMO_STATE_PAUSADA)
    assert stub.UpdatePromo(update, metadata=md).promo.estado == bo.PROMO_STATE_PAUSADA
    unchanged = stub.UpdatePromo(
        bo.UpdatePromoRequest(programa="grpc", id=promo.id, puntos_canje=3), metadata=md
    ).promo
    assert unchanged.estado == bo.PROMO_STATE_PAUSADA
    error = fail(
        stub.UpdatePromo,
        bo.UpdatePromoRequest(programa="grpc", id=promo.id, estado=bo.PROMO_STATE_UNSPECIFIED),
        md,
    )
    assert error_info(error).reason == "solicitud_invalida"
