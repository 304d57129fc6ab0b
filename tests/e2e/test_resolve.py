"""POST /api/v1/fan/resolve through Envoy: the five forms, the aliases, the resolution
order, the current promotion, and every error."""

from __future__ import annotations

import httpx
import pytest

from loyalty_grpc.domain.errors import CodigoError
from tests.e2e.stack import Stack
from tests.e2e.support import assert_error, auth

FANS: list[dict[str, object]] = [
    {
        "id": "RES0001",
        "nombre": "Ana López",
        "correo": "ana@example.com",
        "socio_desde": 2018,
        "temporadas": 5,
        "qr_token": "q7Hk2Pz",
        "puntos": 100,
    },
    {
        "id": "RES0002",
        "nombre": "Beto Ruiz",
        "correo": "beto@example.com",
        "socio_desde": 2019,
        "temporadas": 1,
        "qr_token": "qrBeto2",
        "estado": "baja",
        "baja_motivo": "solicitud del socio",
    },
    {
        "id": "RES0003",
        "nombre": "Carla Mix",
        "correo": "Carla.Mix@Example.com",
        "socio_desde": 2020,
        "temporadas": 2,
        "qr_token": "QRcarla3",
        "puntos": 7,
    },
    # A fan whose QR token reads like another fan's ID, and who has no promotion.
    {
        "id": "RES0005",
        "nombre": "Eva Paz",
        "correo": "eva@example.com",
        "socio_desde": 2024,
        "temporadas": 0,
        "qr_token": "res0003",
    },
]
PROMOS: list[dict[str, object]] = [
    {
        "nombre": "2x1 Hot Dog",
        "descripcion": "Dos por uno",
        "estado": "activa",
        "vigencia_fin": "2099-12-31",
        "puntos_canje": 50,
        "codigos": [
            {"codigo": "HD-0001", "estado": "asignado", "fan": "RES0001"},
            {"codigo": "HD-0002"},
            {"codigo": "HD-0003", "estado": "canjeado", "fan": "RES0003"},
            {"codigo": "HD-0004", "estado": "liberado", "fan": "RES0003"},
            # A code whose text is another fan's ID: the Fan ID reading wins.
            {"codigo": "RES0001", "estado": "asignado", "fan": "RES0003"},
        ],
    },
    {
        "nombre": "Gorra",
        "descripcion": "Gorra oficial",
        "estado": "activa",
        "vigencia_fin": "2099-06-30",
        "codigos": [{"codigo": "GO-0001", "estado": "asignado", "fan": "RES0001"}],
    },
    {
        "nombre": "Vencida",
        "estado": "activa",
        "vigencia_fin": "2020-01-01",
        "codigos": [{"codigo": "VE-0001", "estado": "asignado", "fan": "RES0003"}],
    },
    {
        "nombre": "Pausada",
        "estado": "pausada",
        "vigencia_fin": "2099-12-31",
        "codigos": [{"codigo": "PA-0001", "estado": "asignado", "fan": "RES0003"}],
    },
]
GORRA = {
    "nombre": "Gorra",
    "descripcion": "Gorra oficial",
    "vigencia_fin": "2099-06-30",
    "codigo": "GO-0001",
}
HOTDOG_HD1 = {
    "nombre": "2x1 Hot Dog",
    "descripcion": "Dos por uno",
    "vigencia_fin": "2099-12-31",
    "codigo": "HD-0001",
}
HOTDOG_CARLA = {**HOTDOG_HD1, "codigo": "RES0001"}


@pytest.fixture(scope="module")
def keys(stack: Stack) -> dict[str, str]:
    return stack.program("res", fans=FANS, promos=PROMOS)


def resolve(http: httpx.Client, key: str, body: object) -> httpx.Response:
    return http.post("/api/v1/fan/resolve", headers=auth(key), json=body)


@pytest.mark.parametrize(
    ("body", "fan_id", "promo"),
    [
        ({"fan": "RES0001"}, "RES0001", GORRA),  # earliest end first; the ID beats code "RES0001"
        ({"fan": "  res 0001 "}, "RES0001", GORRA),  # case and spaces normalised
        ({"fan": "\tR E S 0 0 0 1\n"}, "RES0001", GORRA),
        ({"fan": "hd-0001"}, "RES0001", HOTDOG_HD1),  # identified by the code: that code
        ({"fan": "HD-0003"}, "RES0003", HOTDOG_CARLA),  # a redeemed code still names its fan
        ({"fan": "q7Hk2Pz"}, "RES0001", GORRA),  # raw QR token
        ({"fan": "https://res.example/fan/v/q7Hk2Pz"}, "RES0001", GORRA),
        ({"fan": "HTTPS://res.example/fan/v/q7Hk2Pz/?x=1#y"}, "RES0001", GORRA),
        ({"fan": "http://otro.example/v/QRcarla3"}, "RES0003", HOTDOG_CARLA),
        ({"fan": "ANA@EXAMPLE.COM"}, "RES0001", GORRA),  # e-mail, any case
        ({"fan": " carla.mix@example.com "}, "RES0003", HOTDOG_CARLA),
        ({"fan": "res0003"}, "RES0003", HOTDOG_CARLA),  # the Fan ID beats Eva's QR token
        ({"fan": "https://res.example/fan/v/res0003"}, "RES0005", None),  # URL: QR only
        ({"fan_id": "RES0001"}, "RES0001", GORRA),
        ({"qr": "q7Hk2Pz"}, "RES0001", GORRA),
        ({"codigo": "HD-0001"}, "RES0001", HOTDOG_HD1),
        ({"fan": "RES0005"}, "RES0005", None),
    ],
)
def test_forms_and_aliases(keys, http, body, fan_id, promo):
    response = resolve(http, keys["todo"], body)
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert list(data) == ["fan", "promo"]
    assert data["fan"]["id"] == fan_id
    assert data["promo"] == promo


def test_fan_fields_and_exact_null_promo(keys, http):
    response = resolve(http, keys["todo"], {"fan": "RES0005"})
    assert response.content.startswith(b'{"ok":true,"data":{"fan":{"id":"RES0005",')
    assert response.content.endswith(b',"promo":null}}')
    assert response.json()["data"]["fan"] == {
        "id": "RES0005",
        "nombre": "Eva Paz",
        "correo": "eva@example.com",
        "socio_desde": 2024,
        "temporadas": 0,
        "puntos": 0,
    }
    fan = resolve(http, keys["todo"], {"fan": "RES0001"}).json()["data"]["fan"]
    assert list(fan) == ["id", "nombre", "correo", "socio_desde", "temporadas", "puntos"]
    assert (fan["socio_desde"], fan["temporadas"], fan["puntos"]) == (2018, 5, 100)


@pytest.mark.parametrize(
    "body",
    [
        {"fan": "RES0002"},  # baja
        {"fan": "beto@example.com"},  # baja, by e-mail
        {"fan": "qrBeto2"},
        {"fan": "HD-0002"},  # a code never delivered
        {"fan": "HD-0004"},  # a released code
        {"fan": "NADIE"},
        {"fan": "q7hk2pz"},  # QR tokens are case-sensitive
        {"fan": "nadie@example.com"},
        {"fan": "https://res.example/fan/v/"},
        {"fan": "E2E0001"},  # another program's fan
    ],
)
def test_not_found(keys, http, body):
    error = assert_error(resolve(http, keys["todo"], body), CodigoError.FAN_NO_ENCONTRADO)
    assert str(body["fan"]).strip() not in error["detalle"] or not str(body["fan"]).strip()


@pytest.mark.parametrize(
    ("body", "codigo"),
    [
        ({}, CodigoError.CAMPO_REQUERIDO),
        ({"fan": ""}, CodigoError.CAMPO_REQUERIDO),
        ({"fan": "   "}, CodigoError.CAMPO_REQUERIDO),
        ({"otro": "RES0001"}, CodigoError.CAMPO_REQUERIDO),
        ({"fan": "RES0001", "qr": "q7Hk2Pz"}, CodigoError.SOLICITUD_INVALIDA),
        ({"fan": 12345}, CodigoError.SOLICITUD_INVALIDA),
        ({"fan": None}, CodigoError.CAMPO_REQUERIDO),
    ],
)
def test_bad_requests(keys, http, body, codigo):
    error = assert_error(resolve(http, keys["todo"], body), codigo)
    if codigo is CodigoError.CAMPO_REQUERIDO:
        assert "fan" in error["detalle"]


def test_permission(keys, http):
    assert_error(resolve(http, keys["tx"], {"fan": "RES0001"}), CodigoError.PERMISO_DENEGADO)
    # The test key has fan:leer and resolves like a live one.
    assert resolve(http, keys["prueba"], {"fan": "RES0001"}).status_code == 200


def test_resolve_changes_nothing(keys, http):
    before = resolve(http, keys["todo"], {"fan": "hd-0001"}).json()
    for _ in range(3):
        again = resolve(http, keys["todo"], {"fan": "hd-0001"}).json()
    assert again == before
