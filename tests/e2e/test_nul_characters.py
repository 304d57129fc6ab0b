"""A NUL character (U+0000) in any text the POS sends, through the real Envoy and server:
PostgreSQL text cannot hold it, so the call is refused (never a 500) and changes nothing:
by the field's own rule where it has one (codes), else as solicitud_invalida naming the
field. Each case is a request that succeeds as is, with one field altered."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.e2e.stack import Stack
from tests.support import Dump, snapshot

PROGRAM = "nulos"
FAN = "NUL0001"
FANS: list[dict[str, object]] = [
    {
        "id": FAN,
        "nombre": "Ana",
        "correo": "ana@nulos.example",
        "socio_desde": 2020,
        "qr_token": "NulQr01",
        "puntos": 500,
    },
]
PROMOS: list[dict[str, object]] = [
    {
        "nombre": "Nulo",
        "descripcion": "Promo",
        "estado": "activa",
        "vigencia_fin": "2099-12-31",
        "puntos_canje": 5,
        "codigos": [{"codigo": "NUL-0001", "estado": "asignado", "fan": FAN}],
    },
]
NUL = "\u0000"

# (method, path, a body that is valid, the fields to spoil one at a time)
VALID: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/api/v1/fan/resolve", {"fan": FAN}),
    ("POST", "/api/v1/fan/resolve", {"fan_id": FAN}),
    ("POST", "/api/v1/fan/resolve", {"qr": "NulQr01"}),
    ("POST", "/api/v1/fan/resolve", {"codigo": "NUL-0001"}),
    ("POST", "/api/v1/fan/resolve", {"fan": "https://nulos.example/fan/v/NulQr01"}),
    ("POST", "/api/v1/fan/resolve", {"fan": "ana@nulos.example"}),
    (
        "POST",
        "/api/v1/tx",
        {
            "id_externo": "V-NUL-1",
            "fan": FAN,
            "importe": "10.50",
            "terminal": "T1",
            "sitio": "S1",
            "ts": "2026-11-21T10:00:00Z",
            "moneda": "MXN",
        },
    ),
    (
        "POST",
        "/api/v1/tx",
        {"id": "V-NUL-2", "qr": "NulQr01", "importe_centavos": 1050, "caja": "C1", "sucursal": "S"},
    ),
    (
        "POST",
        "/api/v1/redeem",
        {"codigo": "NUL-0001", "terminal": "T1", "ts": "2026-11-21T10:00:00Z"},
    ),
    ("POST", "/api/v1/redeem", {"codigos": ["NUL-0001"]}),
    ("POST", "/api/v1/codes", {"promo": "Nulo", "codigos": ["NUL-0100"]}),
    ("POST", "/api/v1/roster", {"desde": "", "limite": 10}),
]


# Fields no rule of ours reads character by character: PostgreSQL refuses the NUL, and
# the answer names the field (api/requests.reject_nul). The others answer their own error
# (importe_invalido, ts_invalido, codigo_invalido...), which names the field too.
LEFT_TO_POSTGRES = {("/api/v1/fan/resolve", f) for f in ("fan", "fan_id", "qr", "codigo")} | {
    ("/api/v1/tx", "fan"),
    ("/api/v1/tx", "qr"),
    ("/api/v1/codes", "promo"),
}


# Written by others meanwhile: the call counters (every call counts, refused or not) and
# the wallet tables (the stack's sender delivers passes in the background).
MOVING = {"limite_llamadas", "wallet_outbox", "wallet_pases", "wallet_entregas"}


def _stored(stack: Stack) -> Dump:
    return {table: rows for table, rows in snapshot(stack.engine).items() if table not in MOVING}


def _spoiled(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [value + NUL, NUL + value, NUL] if value else [NUL]
    if isinstance(value, list):
        return [[f"{v}{NUL}" for v in value], [NUL]]
    return [f"{value}{NUL}"]


CASES = [
    (method, path, {**body, field: bad}, field)
    for method, path, body in VALID
    for field, value in body.items()
    for bad in _spoiled(value)
]


@pytest.fixture(scope="module")
def key(stack: Stack) -> str:
    return stack.program(PROGRAM, fans=FANS, promos=PROMOS)["todo"]


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    CASES,
    ids=[f"{p.rsplit('/', 1)[-1]}-{f}-{i}" for i, (_, p, _, f) in enumerate(CASES)],
)
def test_a_nul_character_is_refused(
    stack: Stack,
    http: httpx.Client,
    key: str,
    method: str,
    path: str,
    body: dict[str, Any],
    field: str,
) -> None:
    before = _stored(stack)
    response = http.request(method, path, json=body, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code < 500, response.text
    if path == "/api/v1/redeem" and field == "codigos":  # a batch: each code its answer
        resumen = response.json()["data"]["resumen"]
        assert resumen["rechazados"] == resumen["recibidos"], response.text
    else:
        error = response.json()["error"]
        assert field in error["detalle"], error
        if (path, field) in LEFT_TO_POSTGRES:
            assert error["codigo"] == "solicitud_invalida"
            assert error["detalle"] == f"{field}: contiene el carácter NUL (U+0000)"
    assert _stored(stack) == before


def test_a_nul_in_the_roster_query_string(http: httpx.Client, key: str) -> None:
    response = http.get(
        "/api/v1/roster", params={"desde": NUL}, headers={"Authorization": f"Bearer {key}"}
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["codigo"] == "cursor_invalido"


def test_the_valid_requests_are_valid(http: httpx.Client, key: str) -> None:
    """The cases above spoil requests that work."""
    for method, path, body in VALID:
        response = http.request(method, path, json=body, headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 200, (path, body, response.text)
