"""Who gets the gateway's error metadata (api/gateway_protocol.py), over a real channel to a
real server on real PostgreSQL: a native gRPC caller gets the real status and its
google.rpc.ErrorInfo (grpc-status-details-bin) but no `x-http-status` / `x-envelope`; the
same call carrying the gateway mark `x-loyalty-gateway: 1` (what Envoy sets on every request
it forwards) gets them too. Through the real Envoy: tests/e2e/test_gateway_mark.py."""

from __future__ import annotations

import json
import secrets
from typing import Any

import grpc
import pytest

from loyalty_grpc.api.errors import envelope
from loyalty_grpc.api.gateway_protocol import (
    ENVELOPE_KEY,
    GATEWAY_MARK_KEY,
    GATEWAY_MARK_VALUE,
    HTTP_STATUS_KEY,
)
from loyalty_grpc.domain.errors import CATALOGO, CodigoError, LoyaltyError
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as bo
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as bo_grpc
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pos
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pos_grpc
from tests.support import ADMIN_TOKEN, Admin, error_info

GATEWAY_ONLY = {HTTP_STATUS_KEY, ENVELOPE_KEY}
MARK = ((GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE),)


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> pos_grpc.PosServiceStub:
    return pos_grpc.PosServiceStub(channel)


@pytest.fixture(scope="module")
def key(channel: grpc.Channel) -> str:
    admin = Admin(bo_grpc.BackofficeServiceStub(channel), ADMIN_TOKEN)
    admin.program("marca", "Club Marca")
    return admin.key("marca", "Caja Marca", ["fan:leer"])[1]


def bearer(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


def failed(
    call: grpc.UnaryUnaryMultiCallable[Any, Any],
    request: object,
    metadata: tuple[tuple[str, str], ...],
) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call(request, metadata=metadata)
    return caught.value


def trailing(error: Any) -> dict[str, str | bytes]:
    """Trailing metadata of a failed call (a grpc.RpcError that is also a grpc.Call)."""
    return dict(error.trailing_metadata() or ())


def test_a_native_error_has_its_status_and_errorinfo_but_no_envelope(stub, key):
    error = failed(stub.ResolveFan, pos.ResolveFanRequest(fan="NADIE0001"), bearer(key))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error_info(error).reason == "fan_no_encontrado"
    assert error_info(error).metadata["http_status"] == "404"
    meta = trailing(error)
    assert "grpc-status-details-bin" in meta
    assert not GATEWAY_ONLY & set(meta)


def test_the_same_error_with_the_mark_has_the_envelope(stub, key):
    error = failed(stub.ResolveFan, pos.ResolveFanRequest(fan="NADIE0001"), bearer(key) + MARK)
    assert error.code() == grpc.StatusCode.NOT_FOUND
    info = error_info(error)
    assert info.reason == "fan_no_encontrado"
    meta = trailing(error)
    assert meta[HTTP_STATUS_KEY] == "404"
    expected = envelope(LoyaltyError(CodigoError.FAN_NO_ENCONTRADO, info.metadata["detalle"]))
    assert meta[ENVELOPE_KEY] == expected
    assert json.loads(str(meta[ENVELOPE_KEY]))["error"]["codigo"] == "fan_no_encontrado"


@pytest.mark.parametrize("value", ["0", "", "true", GATEWAY_MARK_VALUE + " "])
def test_only_the_marks_exact_value_counts(stub, value):
    error = failed(stub.Ping, pos.PingRequest(), ((GATEWAY_MARK_KEY, value),))
    assert error_info(error).reason == "no_autenticado"
    assert not GATEWAY_ONLY & set(trailing(error))


@pytest.mark.parametrize("marked", [False, True], ids=["native", "marked"])
def test_refusals_before_the_key_is_known_follow_the_mark(stub, marked):
    """no_autenticado and clave_invalida (the interceptor refuses before any servicer)."""
    for metadata, codigo in (
        ((), CodigoError.NO_AUTENTICADO),
        (bearer("lp_vivo_" + secrets.token_hex(16)), CodigoError.CLAVE_INVALIDA),
    ):
        error = failed(stub.Ping, pos.PingRequest(), metadata + (MARK if marked else ()))
        assert error.code() == getattr(grpc.StatusCode, CATALOGO[codigo].grpc)
        assert error_info(error).reason == codigo.value
        meta = trailing(error)
        if marked:
            assert meta[HTTP_STATUS_KEY] == str(CATALOGO[codigo].http)
            assert json.loads(str(meta[ENVELOPE_KEY]))["error"]["codigo"] == codigo.value
        else:
            assert not GATEWAY_ONLY & set(meta)


def test_backoffice_errors_follow_the_mark_too(channel):
    backoffice = bo_grpc.BackofficeServiceStub(channel)
    request = bo.ListKeysRequest(programa="no-existe")
    native = failed(backoffice.ListKeys, request, bearer("wrong-token"))
    assert error_info(native).reason == "clave_invalida"
    assert not GATEWAY_ONLY & set(trailing(native))
    marked = failed(backoffice.ListKeys, request, bearer("wrong-token") + MARK)
    assert trailing(marked)[HTTP_STATUS_KEY] == "401"


def test_a_success_carries_no_gateway_metadata_either_way(stub, key):
    for metadata in (bearer(key), bearer(key) + MARK):
        response, call = stub.Ping.with_call(pos.PingRequest(), metadata=metadata)
        assert response.ok
        sent = {*dict(call.initial_metadata() or ()), *dict(call.trailing_metadata() or ())}
        assert not GATEWAY_ONLY & sent
