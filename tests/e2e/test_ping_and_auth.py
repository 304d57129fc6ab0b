"""Over HTTP through the real Envoy to the real server and PostgreSQL: ping, keys,
permissions and the exact envelope bytes of successes and errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import grpc
import httpx
import pytest

from loyalty_grpc.api.errors import envelope
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as bo
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as bo_grpc
from tests.e2e.stack import ALL, Stack
from tests.e2e.support import assert_clean_headers, assert_error, auth


def test_post_ping_live_key(stack: Stack, http: httpx.Client):
    response = http.post("/api/v1/ping", headers=auth(stack.keys["todo"]))
    assert response.status_code == 200
    assert_clean_headers(response)
    assert response.content.startswith(b'{"ok":true,"data":{')
    data = response.json()["data"]
    assert list(data) == ["integracion", "programa", "modo", "permisos", "hora"]
    assert data["integracion"] == "Caja Todo"
    assert data["programa"] == "Club E2E"
    assert data["modo"] == "vivo"
    assert data["permisos"] == ALL
    hora = datetime.fromisoformat(data["hora"])
    assert data["hora"].endswith("Z")
    assert abs(datetime.now(UTC) - hora) < timedelta(minutes=1)


def test_post_ping_accepts_an_empty_json_body(stack: Stack, http: httpx.Client):
    response = http.post(
        "/api/v1/ping",
        headers={**auth(stack.keys["ping"]), "content-type": "application/json"},
        content=b"{}",
    )
    assert response.status_code == 200
    assert response.json()["data"]["permisos"] == []


def test_get_ping_has_fewer_fields(stack: Stack, http: httpx.Client):
    response = http.get("/api/v1/ping", headers=auth(stack.keys["todo"]))
    assert response.status_code == 200
    assert response.content.startswith(b'{"ok":true,"data":{"programa":"Club E2E","modo":"vivo",')
    assert list(response.json()["data"]) == ["programa", "modo", "hora"]


def test_test_key_is_prueba(stack: Stack, http: httpx.Client):
    for method in ("GET", "POST"):
        response = http.request(method, "/api/v1/ping", headers=auth(stack.keys["prueba"]))
        assert response.json()["data"]["modo"] == "prueba"


@pytest.mark.parametrize(
    ("headers", "codigo"),
    [
        ({}, CodigoError.NO_AUTENTICADO),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, CodigoError.NO_AUTENTICADO),
        ({"Authorization": "Bearer"}, CodigoError.NO_AUTENTICADO),
        ({"Authorization": "Bearer lp_vivo_" + "Z" * 30}, CodigoError.CLAVE_INVALIDA),
        ({"Authorization": "Bearer lp_otro_" + "Z" * 30}, CodigoError.CLAVE_INVALIDA),
    ],
)
def test_authentication_errors(http: httpx.Client, headers, codigo):
    for method in ("GET", "POST"):
        assert_error(http.request(method, "/api/v1/ping", headers=headers), codigo)


def test_exact_error_bytes(http: httpx.Client):
    response = http.post("/api/v1/ping")
    expected = envelope(
        LoyaltyError(CodigoError.NO_AUTENTICADO, "falta el encabezado Authorization")
    )
    assert response.content == expected.encode()


def test_revoked_key_is_refused(stack: Stack, http: httpx.Client):
    key_id, key = stack.admin.key("e2e", "Caja Efimera", [])
    assert http.post("/api/v1/ping", headers=auth(key)).status_code == 200
    stack.admin.revoke(key_id)
    assert_error(http.post("/api/v1/ping", headers=auth(key)), CodigoError.CLAVE_INVALIDA)


ENDPOINTS = [
    ("POST", "/api/v1/fan/resolve", {"fan": "E2E0001"}),
    ("POST", "/api/v1/tx", {"id_externo": "v1", "fan": "E2E0001", "importe": 10}),
    ("POST", "/api/v1/redeem", {"codigo": "HD-1"}),
    ("GET", "/api/v1/promos", None),
    ("POST", "/api/v1/codes", {"promo": 1, "codigos": ["A"]}),
    ("GET", "/api/v1/roster", None),
    ("POST", "/api/v1/roster", {"limite": 10}),
]


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_permission_denied(stack: Stack, http: httpx.Client, method, path, body):
    denied = http.request(method, path, headers=auth(stack.keys["ping"]), json=body)
    error = assert_error(denied, CodigoError.PERMISO_DENEGADO)
    assert "permiso" in error["detalle"]


def test_tx_only_key_cannot_resolve(stack: Stack, http: httpx.Client):
    response = http.post(
        "/api/v1/fan/resolve", headers=auth(stack.keys["tx"]), json={"fan": "E2E0001"}
    )
    assert "fan:leer" in assert_error(response, CodigoError.PERMISO_DENEGADO)["detalle"]


def test_unknown_path_and_method(stack: Stack, http: httpx.Client):
    headers = auth(stack.keys["todo"])
    assert_error(http.get("/api/v1/nope", headers=headers), CodigoError.RUTA_NO_ENCONTRADA)
    response = http.delete("/api/v1/ping", headers=headers)
    assert_error(response, CodigoError.METODO_NO_PERMITIDO)
    assert response.headers["allow"] == "GET, POST"
    assert_error(http.get("/", headers=headers), CodigoError.RUTA_NO_ENCONTRADA)
    assert_error(
        http.post("/loyalty.v1.BackofficeService/ListPrograms", headers=headers),
        CodigoError.RUTA_NO_ENCONTRADA,
    )


def test_malformed_json_and_wrong_types(stack: Stack, http: httpx.Client):
    headers = {**auth(stack.keys["todo"]), "content-type": "application/json"}
    error = assert_error(
        http.post("/api/v1/fan/resolve", headers=headers, content=b'{"fan":'),
        CodigoError.SOLICITUD_INVALIDA,
    )
    assert error["detalle"]
    error = assert_error(
        http.post("/api/v1/fan/resolve", headers=headers, content=json.dumps({"fan": 12345})),
        CodigoError.SOLICITUD_INVALIDA,
    )
    assert "fan" in error["detalle"]


def test_oversized_body(stack: Stack, http: httpx.Client):
    big = json.dumps({"codigos": ["X" * 60] * 40_000}).encode()  # ~2.5 MB
    response = http.post(
        "/api/v1/codes",
        headers={**auth(stack.keys["todo"]), "content-type": "application/json"},
        content=big,
    )
    assert_error(response, CodigoError.SOLICITUD_MUY_GRANDE)


def test_backoffice_not_reachable_by_grpc_through_envoy(stack: Stack):
    with grpc.insecure_channel(f"127.0.0.1:{stack.envoy_port}") as channel:
        stub = bo_grpc.BackofficeServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.ListPrograms(bo.ListProgramsRequest(), metadata=stack.admin.md, timeout=5)
    assert caught.value.code() != grpc.StatusCode.OK
    # ... while the same call on the gRPC port works.
    programs = stack.admin.stub.ListPrograms(bo.ListProgramsRequest(), metadata=stack.admin.md)
    assert "e2e" in [p.id for p in programs.programs]
