"""Look-alike letters and digits through the real Envoy, server and PostgreSQL (issue 22 §5).

Before: redeeming `hd-dısp-0001` (dotless ı) reached the code HD-DISP-0001, `otroſi01`
(long s) resolved the Fan ID OTROSI01 and an e-mail with the Kelvin sign matched `kiki@…`:
Python's upper()/lower() and PostgreSQL's lower() fold those letters into ASCII ones.
Now Fan IDs, codes and QR tokens are ASCII, only ASCII letters change case, and every case
here answers as for a value nobody has, changing nothing."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from loyalty_grpc.domain.errors import CodigoError
from tests.e2e.stack import Stack
from tests.e2e.support import assert_error, auth
from tests.support import Dump, snapshot

PROGRAM = "parecidos"
KELVIN = "\u212a"
FANS: list[dict[str, object]] = [
    {
        "id": "OTROSI01",
        "nombre": "Otro",
        "correo": "otro@parecidos.example",
        "socio_desde": 2020,
        "qr_token": "qrOtro01",
        "puntos": 10,
    },
    {
        "id": "KIKI01",
        "nombre": "Kiki",
        "correo": "kiki@parecidos.example",
        "socio_desde": 2021,
        "qr_token": "qrKiki01",
        "puntos": 20,
    },
]
PROMOS: list[dict[str, object]] = [
    {
        "nombre": "Parecida",
        "vigencia_fin": "2099-12-31",
        "puntos_canje": 50,
        "codigos": [
            {"codigo": "HD-DISP-0001"},
            {"codigo": "HD-ASIG-0001", "estado": "asignado", "fan": "KIKI01"},
        ],
    }
]

# Each is one ASCII identifier of the program with one character swapped for a look-alike
# (or an invisible character added).
FAN_LOOK_ALIKES = [
    "otro\u017fi01",  # ſ long s: upper() is S (the case)
    "OTROS\u013101",  # ı dotless i
    "\uff2fTROSI01",  # Ｏ fullwidth
    "OTROSI\uff10\uff11",  # ０１ fullwidth digits
    "\u041eTR\u041eSI01",  # О Cyrillic
    "KIKI\u200b01",  # zero-width space
    "KIKI01\u200d",  # zero-width joiner
    "\ufeffKIKI01",  # zero-width no-break space
    f"{KELVIN}IKI01",  # Kelvin sign
    "https://parecidos.example/fan/v/qrKik\u0131\u200b01",
    "https://parecidos.example/fan/v/qr\uff2biki01",
    f"{KELVIN}iki@parecidos.example",  # lower() under a UTF-8 collation is kiki@…
    "k\u0131k\u0131@parecidos.example",
    "\u043a\u0456\u043a\u0456@parecidos.example",  # Cyrillic к і
    "kiki@parecidos.exampl\u0435",  # Cyrillic е
    "hd-as\u0131g-0001",  # a code delivered to KIKI01, with ı
    "HD-ASIG-\uff10\uff10\uff10\uff11",
]
CODE_LOOK_ALIKES = [
    "hd-d\u0131sp-0001",  # the case (409 codigo_no_asignado before)
    "hd-as\u0131g-0001",  # on an `asignado` code it redeemed it and credited points
    "HD-A\u0405IG-0001",  # Ѕ Cyrillic dze
    "\uff28\uff24-ASIG-0001",  # ＨＤ fullwidth
    "HD-ASIG-\uff10001",
    "HD-ASIG-0001\u200b",
    "\ufeffHD-ASIG-0001",
    f"HD-ASIG-0001{KELVIN}",
]
# Written by others meanwhile: the call counters and the wallet tables.
MOVING = {"limite_llamadas", "wallet_outbox", "wallet_pases", "wallet_entregas"}


@pytest.fixture(scope="module")
def key(stack: Stack) -> str:
    return stack.program(PROGRAM, tasa="1", fans=FANS, promos=PROMOS)["todo"]


def stored(stack: Stack) -> Dump:
    return {table: rows for table, rows in snapshot(stack.engine).items() if table not in MOVING}


def send(http: httpx.Client, key: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return http.post(path, json=body, headers=auth(key))


def test_the_ascii_originals_are_found(http: httpx.Client, key: str):
    """The look-alikes below miss identifiers that exist."""
    for value, fan_id in [
        ("otrosi01", "OTROSI01"),
        ("KIKI@Parecidos.Example", "KIKI01"),
        ("hd-asig-0001", "KIKI01"),
        ("https://parecidos.example/fan/v/qrKiki01", "KIKI01"),
    ]:
        response = send(http, key, "/api/v1/fan/resolve", {"fan": value})
        assert response.status_code == 200, response.text
        assert response.json()["data"]["fan"]["id"] == fan_id


@pytest.mark.parametrize("value", FAN_LOOK_ALIKES)
@pytest.mark.parametrize("field", ["fan", "codigo"])
def test_resolve_finds_no_fan(http: httpx.Client, key: str, value: str, field: str):
    error = assert_error(
        send(http, key, "/api/v1/fan/resolve", {field: value}), CodigoError.FAN_NO_ENCONTRADO
    )
    assert value not in error["detalle"]


@pytest.mark.parametrize("value", FAN_LOOK_ALIKES)
def test_tx_finds_no_fan_and_writes_nothing(stack: Stack, http: httpx.Client, key: str, value):
    before = stored(stack)
    body = {"id_externo": f"parecido-{FAN_LOOK_ALIKES.index(value)}", "fan": value, "importe": 5}
    assert_error(send(http, key, "/api/v1/tx", body), CodigoError.FAN_NO_ENCONTRADO)
    assert stored(stack) == before


@pytest.mark.parametrize("value", CODE_LOOK_ALIKES)
def test_redeem_finds_no_code_and_changes_nothing(
    stack: Stack, http: httpx.Client, key: str, value: str
):
    before = stored(stack)
    error = assert_error(
        send(http, key, "/api/v1/redeem", {"codigo": value}), CodigoError.CODIGO_NO_ENCONTRADO
    )
    assert error["detalle"].isascii() or "\\u" in error["detalle"]
    assert stored(stack) == before


def test_a_redeem_batch_of_look_alikes_rejects_each_and_changes_nothing(
    stack: Stack, http: httpx.Client, key: str
):
    before = stored(stack)
    response = send(http, key, "/api/v1/redeem", {"codigos": CODE_LOOK_ALIKES})
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert data["resumen"]["rechazados"] == len(CODE_LOOK_ALIKES)
    assert {r["error"]["codigo"] for r in data["resultados"]} == {"codigo_no_encontrado"}
    assert stored(stack) == before


@pytest.mark.parametrize("value", CODE_LOOK_ALIKES)
@pytest.mark.parametrize("shape", ["array", "text"])
def test_codes_refuses_a_code_that_is_not_ascii(
    stack: Stack, http: httpx.Client, key: str, value: str, shape: str
):
    before = stored(stack)
    codigos: list[str] | str = ["HD-NUEVO-1", value]
    if shape == "text":
        codigos = "HD-NUEVO-1, " + value
    error = assert_error(
        send(http, key, "/api/v1/codes", {"promo": "Parecida", "codigos": codigos}),
        CodigoError.CODIGO_INVALIDO,
    )
    assert "contiene caracteres que no son ASCII" in error["detalle"]
    assert "\\u" in error["detalle"]  # the look-alike shown escaped
    assert stored(stack) == before


@pytest.mark.parametrize(
    ("body", "codigo"),
    [
        ({"importe": "\uff11\uff12"}, CodigoError.IMPORTE_INVALIDO),  # １２
        ({"importe": "\u0661\u0662"}, CodigoError.IMPORTE_INVALIDO),  # ١٢
        ({"importe": "$ 1\uff12.50"}, CodigoError.IMPORTE_INVALIDO),
        (
            {"importe": 12, "ts": "\uff11\uff17\uff19\uff15\uff12\uff19\uff15\uff18\uff11\uff12"},
            CodigoError.TS_INVALIDO,
        ),
        ({"importe": 12, "moneda": "MX\u039d"}, CodigoError.MONEDA_NO_SOPORTADA),  # Greek Ν
        ({"importe": 12, "moneda": "\uff2d\uff38\uff2e"}, CodigoError.MONEDA_NO_SOPORTADA),
    ],
)
def test_tx_reads_no_number_or_currency_from_look_alikes(
    stack: Stack, http: httpx.Client, key: str, body: dict[str, Any], codigo: CodigoError
):
    before = stored(stack)
    sale = {"id_externo": f"digitos-{codigo.value}-{len(str(body))}", "fan": "KIKI01", **body}
    error = assert_error(send(http, key, "/api/v1/tx", sale), codigo)
    assert "\\u" in error["detalle"]  # what arrived, shown escaped
    assert stored(stack) == before


def test_roster_reads_no_limite_in_other_digits(http: httpx.Client, key: str):
    response = http.get("/api/v1/roster", params={"limite": "\uff11\uff10"}, headers=auth(key))
    assert_error(response, CodigoError.SOLICITUD_INVALIDA)
