"""Strict request bodies on the real stack (Envoy + server + PostgreSQL): the cases of
issue 11 part 3 and every google.protobuf.Value field of the POS API. Each refusal is the
envelope with its catalogue codigo, a one-line detalle that names the field and never
repeats the body (no Fan ID, no code), and nothing is written: no sale, no ledger entry,
no balance change, no code redeemed or deposited.

The gateway's grammar and types in depth (against an in-test server): test_strict_json.py.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import ColumnElement, Table, func, select

from loyalty_grpc.domain.errors import CodigoError
from loyalty_grpc.store.tables import codigos, fans, movimientos, ventas
from tests.e2e.stack import Stack
from tests.e2e.support import assert_error, auth

P = "estricto"
_ids = itertools.count()
FAN = "ESTR0001"  # the Fan ID that must never come back in a detalle
OTRO_FAN = "ESTR0002"
CODE = "HD-0003"
PROMO = "Hot Dog"


def fan(fan_id: str) -> dict[str, object]:
    return {
        "id": fan_id,
        "nombre": f"Fan {fan_id}",
        "correo": f"{fan_id.lower()}@example.com",
        "socio_desde": 2020,
        "temporadas": 1,
        "qr_token": f"qr{fan_id}",
        "puntos": 100,
    }


@pytest.fixture(scope="module")
def keys(stack: Stack) -> dict[str, str]:
    return stack.program(
        P,
        tasa="1",
        fans=[fan(FAN), fan(OTRO_FAN)],
        promos=[
            {
                "nombre": PROMO,
                "estado": "activa",
                "vigencia_fin": "2099-12-31",
                "puntos_canje": 50,
                "codigos": [
                    {"codigo": CODE, "estado": "asignado", "fan": FAN},
                    {"codigo": "HD-0004", "estado": "asignado", "fan": FAN},
                ],
            }
        ],
    )


@pytest.fixture
def key(keys: dict[str, str]) -> str:
    return keys["todo"]


@dataclass(frozen=True)
class State:
    """Everything a refused call must leave as it was."""

    ventas: int
    movimientos: int
    saldos: tuple[int, ...]
    codigos: tuple[tuple[str, str], ...]


def state(stack: Stack) -> State:
    with stack.engine.connect() as conn:
        fan_pks = select(fans.c.pk).where(fans.c.programa_id == P)

        def count(table: Table, condition: ColumnElement[bool]) -> int:
            return int(
                conn.execute(select(func.count()).select_from(table).where(condition)).scalar_one()
            )

        return State(
            ventas=count(ventas, ventas.c.programa_id == P),
            movimientos=count(movimientos, movimientos.c.fan_pk.in_(fan_pks)),
            saldos=tuple(
                int(p)
                for p in conn.execute(
                    select(fans.c.puntos).where(fans.c.programa_id == P).order_by(fans.c.fan_id)
                ).scalars()
            ),
            codigos=tuple(
                (str(r.codigo), str(r.estado))
                for r in conn.execute(
                    select(codigos.c.codigo, codigos.c.estado)
                    .where(codigos.c.programa_id == P)
                    .order_by(codigos.c.id)
                )
            ),
        )


@pytest.fixture
def unchanged(stack: Stack, keys: dict[str, str]) -> Iterator[None]:
    """The test's calls write nothing."""
    before = state(stack)
    yield
    assert state(stack) == before


def post(
    http: httpx.Client,
    key: str,
    path: str,
    body: str | bytes,
    content_type: str = "application/json",
) -> httpx.Response:
    return http.post(path, content=body, headers={**auth(key), "content-type": content_type})


def refused(response: httpx.Response, codigo: CodigoError, body: str | bytes) -> str:
    """The envelope of `codigo`; its detalle (returned) is one line, repeats no part of the
    body: not the Fan ID, not the code, nor any other quoted value."""
    detalle = assert_error(response, codigo)["detalle"]
    assert detalle
    assert "\n" not in detalle
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    for value in (FAN, CODE, CODE.lower(), "Unexpected", "invalid value", "^"):
        assert value not in detalle, detalle
    for quoted in text.split('"')[1::2]:
        if len(quoted) >= 5 and not quoted.isidentifier():
            assert quoted not in detalle, detalle
    return detalle


# ---------------------------------------------------------------- the cases


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize("body", ['{"codigos":[["HD-0003"]]}', '{"codigos":[[["hd-0003"]],[]]}'])
def test_nested_codigos_redeem_nothing(stack, http, key, body):
    detalle = refused(post(http, key, "/api/v1/redeem", body), CodigoError.SOLICITUD_INVALIDA, body)
    assert detalle == "codigos[0]: debe ser un texto; llegó una lista"


@pytest.mark.usefixtures("unchanged")
def test_trailing_comma_writes_no_sale(http, key):
    body = f'{{"id_externo":"coma-1","fan":"{FAN}","importe":"1",}}'
    detalle = refused(post(http, key, "/api/v1/tx", body), CodigoError.SOLICITUD_INVALIDA, body)
    assert detalle == (
        "cuerpo: JSON no válido en la línea 1, columna 55: sobra una coma antes de cerrar el objeto"
    )


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(
    ("path", "body", "detalle"),
    [
        (
            "/api/v1/fan/resolve",
            f'{{"fan": {FAN}}}',
            "fan: JSON no válido en la línea 1, columna 9: se esperaba un valor JSON (un texto "
            "entre comillas dobles, un número, un objeto, una lista, true, false o null)",
        ),
        (
            "/api/v1/tx",
            f'{{"id_externo": "t-1", "fan": "{FAN}", "importe": 1, }}',
            "cuerpo: JSON no válido en la línea 1, columna 56: sobra una coma antes de cerrar el "
            "objeto",
        ),
        (
            "/api/v1/tx",
            f"{{'id_externo': 't-2', 'fan': '{FAN}', 'importe': 1}}",
            "cuerpo: JSON no válido en la línea 1, columna 2: los nombres de campo van entre "
            "comillas dobles, no simples",
        ),
        (
            "/api/v1/tx",
            f'{{id_externo: "t-3", fan: "{FAN}", importe: 1}}',
            "cuerpo: JSON no válido en la línea 1, columna 2: los nombres de campo van entre "
            "comillas dobles",
        ),
        (
            "/api/v1/tx",
            f'{{"id_externo": "t-4", "fan": "{FAN}", "importe": NaN}}',
            "importe: JSON no válido en la línea 1, columna 53: NaN e Infinity no son números JSON",
        ),
        (
            "/api/v1/tx",
            f'{{"id_externo": "t-5", "fan": "{FAN}", "importe": 1}} // caja 3',
            "cuerpo: JSON no válido en la línea 1, columna 56: JSON no admite comentarios",
        ),
        (
            "/api/v1/tx",
            f'{{"id_externo": "t-6", "fan": "{FAN}", "importe": 012}}',
            "importe: JSON no válido en la línea 1, columna 53: un número no lleva ceros a la "
            "izquierda",
        ),
        (
            "/api/v1/tx",
            f'{{"id_externo": "t-7", "fan": "{FAN}", "importe": 1}}garbage',
            "cuerpo: JSON no válido en la línea 1, columna 55: hay algo más después del objeto "
            "JSON",
        ),
        (
            "/api/v1/tx",
            '{"id_externo": "t-8", "fan": 12345, "importe": 1}',
            "fan: debe ser un texto; llegó un número",
        ),
        (
            "/api/v1/tx",
            f'{{"id_externo": "t-9", "fan": {{"id": "{FAN}"}}, "importe": 1}}',
            "fan: debe ser un texto; llegó un objeto",
        ),
        (
            "/api/v1/redeem",
            f'{{"codigo": ["{CODE}"]}}',
            "codigo: debe ser un texto; llegó una lista",
        ),
        (
            "/api/v1/redeem",
            f'{{"codigos": "{CODE}"}}',
            "codigos: debe ser una lista de textos; llegó un texto",
        ),
    ],
)
def test_syntax_and_type_errors_never_repeat_the_body(http, key, path, body, detalle):
    assert refused(post(http, key, path, body), CodigoError.SOLICITUD_INVALIDA, body) == detalle


# ---------------------------------------------------------------- google.protobuf.Value fields


SALE = {"id_externo": "valor-1", "fan": FAN}
VALUE_CASES: list[tuple[str, Any, CodigoError, str]] = [
    # tx: importe (string or number)
    *(
        (
            "/api/v1/tx",
            {**SALE, "importe": bad},
            CodigoError.IMPORTE_INVALIDO,
            f"importe: debe ser un número o un texto con el importe en pesos; llegó {tipo}",
        )
        for bad, tipo in (
            ([100], "una lista"),
            ([[1]], "una lista"),
            ({"pesos": 1}, "un objeto"),
            (True, "un booleano"),
        )
    ),
    # tx: importe_centavos and its aliases (a number)
    *(
        (
            "/api/v1/tx",
            {**SALE, campo: bad},
            CodigoError.IMPORTE_INVALIDO,
            f"{campo}: debe ser un número entero de centavos; llegó {tipo}",
        )
        for campo in ("importe_centavos", "centavos", "amount_cents")
        for bad, tipo in (
            ("1250", "un texto"),
            ([1250], "una lista"),
            ({}, "un objeto"),
            (False, "un booleano"),
        )
    ),
    # tx: ts (string or number)
    *(
        (
            "/api/v1/tx",
            {**SALE, "importe": 1, "ts": bad},
            CodigoError.TS_INVALIDO,
            f"ts: debe ser un texto ISO 8601 o un número epoch; llegó {tipo}",
        )
        for bad, tipo in (
            ([1795295812], "una lista"),
            ({"t": 1}, "un objeto"),
            (True, "un booleano"),
        )
    ),
    # redeem: ts
    *(
        (
            "/api/v1/redeem",
            {"codigo": CODE, "ts": bad},
            CodigoError.TS_INVALIDO,
            f"ts: debe ser un texto ISO 8601 o un número epoch; llegó {tipo}",
        )
        for bad, tipo in (([1795295812], "una lista"), ({}, "un objeto"))
    ),
    # codes: promo / promo_id (number or string)
    *(
        (
            "/api/v1/codes",
            {campo: bad, "codigos": ["NUEVO-1"]},
            CodigoError.SOLICITUD_INVALIDA,
            f"{campo}: debe ser el id (número) o el nombre (texto) de la promoción, llegó {tipo}",
        )
        for campo in ("promo", "promo_id")
        for bad, tipo in (([1], "una lista"), ({"id": 1}, "un objeto"), (True, "un booleano"))
    ),
    # codes: codigos / codes (list of strings or pasted text)
    *(
        ("/api/v1/codes", {"promo": PROMO, campo: bad}, CodigoError.SOLICITUD_INVALIDA, detalle)
        for campo in ("codigos", "codes")
        for bad, detalle in (
            ([["NUEVO-1"]], f"{campo}[0]: debe ser texto, llegó una lista"),
            (["NUEVO-1", 7], f"{campo}[1]: debe ser texto, llegó un número"),
            (["NUEVO-1", None], f"{campo}[1]: debe ser texto, llegó null"),
            (5, f"{campo}: debe ser una lista de textos o un texto, llegó un número"),
            (
                {"a": "NUEVO-1"},
                f"{campo}: debe ser una lista de textos o un texto, llegó un objeto",
            ),
        )
    ),
    # roster (POST): desde (string or number), limite (number)
    *(
        (
            "/api/v1/roster",
            {"desde": bad},
            CodigoError.SOLICITUD_INVALIDA,
            f"desde: debe ser el texto `siguiente` de la llamada anterior; llegó {tipo}",
        )
        for bad, tipo in (([1], "una lista"), ({}, "un objeto"), (True, "un booleano"))
    ),
    *(
        (
            "/api/v1/roster",
            {"limite": bad},
            CodigoError.SOLICITUD_INVALIDA,
            f"limite: {problema}; debe ser un entero de 1 a 2000 (por omisión 500)",
        )
        for bad, problema in (
            ("2", "llegó un texto (en el cuerpo JSON es un número)"),
            ([2], "llegó una lista"),
            ({}, "llegó un objeto"),
            (True, "llegó un booleano"),
        )
    ),
]


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(("path", "body", "codigo", "detalle"), VALUE_CASES)
def test_value_fields_take_only_the_contracts_json_types(http, key, path, body, codigo, detalle):
    text = json.dumps(body)
    assert refused(post(http, key, path, text), codigo, text) == detalle


# ---------------------------------------------------------------- decisions


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(
    ("body", "detalle"),
    [
        (
            f'{{"id_externo":"dup-1","fan":"{FAN}","importe":"1","importe":"2"}}',
            "importe: el campo aparece dos veces",
        ),
        (
            f'{{"id_externo":"dup-2","fan":"{FAN}","fan":"{OTRO_FAN}","importe":"1"}}',
            "fan: el campo aparece dos veces",
        ),
        (
            f'{{"id_externo":"dup-3","idExterno":"dup-4","fan":"{FAN}","importe":"1"}}',
            "id_externo: el campo aparece dos veces (como id_externo y como idExterno)",
        ),
    ],
)
def test_duplicate_keys_are_refused(http, key, body, detalle):
    assert (
        refused(post(http, key, "/api/v1/tx", body), CodigoError.SOLICITUD_INVALIDA, body)
        == detalle
    )


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "application/json; charset=iso-8859-1"],
)
def test_json_with_another_content_type_is_refused(http, key, content_type):
    body = json.dumps({"id_externo": "ct-1", "fan": FAN, "importe": "1"})
    detalle = refused(
        post(http, key, "/api/v1/tx", body, content_type), CodigoError.SOLICITUD_INVALIDA, body
    )
    assert detalle.startswith("Content-Type: ")


def sale(http: httpx.Client, key: str, id_externo: str, **amount: object) -> dict[str, object]:
    body = json.dumps({"id_externo": id_externo, "fan": OTRO_FAN, **amount})
    response = post(http, key, "/api/v1/tx", body)
    assert response.status_code == 200, response.text
    data: dict[str, object] = response.json()["data"]
    return data


def stored_cents(stack: Stack, folio: object) -> int:
    with stack.engine.connect() as conn:
        return int(
            conn.execute(select(ventas.c.importe_centavos).where(ventas.c.id == folio)).scalar_one()
        )


@pytest.mark.parametrize(
    ("amount", "raw"),
    [
        ({"importe": -0}, None),
        ({"importe": -0.0}, None),
        ({"importe": "-0"}, None),
        ({"importe": "$-0.00"}, None),
        ({"importe_centavos": -0.0}, None),
        ({"importe": 0}, '{"id_externo": "ID", "fan": "ESTR0002", "importe": -0}'),
        ({"importe": 0}, '{"id_externo": "ID", "fan": "ESTR0002", "importe": -0e5}'),
    ],
)
def test_minus_zero_is_zero(stack, http, key, amount, raw):
    id_externo = f"cero-{next(_ids)}"
    if raw is None:
        data = sale(http, key, id_externo, **amount)
    else:
        response = post(http, key, "/api/v1/tx", raw.replace("ID", id_externo))
        assert response.status_code == 200, response.text
        data = response.json()["data"]
    assert (data["duplicado"], data["puntos_otorgados"]) == (False, 0)
    assert stored_cents(stack, data["tx"]) == 0
    # The same sale with 0: a duplicate, not a conflict.
    again = sale(http, key, id_externo, importe=0)
    assert (again["duplicado"], again["tx"]) == (True, data["tx"])


@pytest.mark.parametrize(
    ("importe", "cents"),
    [
        ("$\u00a0100", 10_000),
        ("MX$\u00a099.90", 9_990),
        ("1234,56\u00a0MXN", 123_456),
        ("MXN\u202f1.234,56", 123_456),
    ],
)
def test_a_no_break_space_after_the_currency_is_a_space(stack, http, key, importe, cents):
    data = sale(http, key, f"nbsp-{importe}", importe=importe)
    assert data["puntos_otorgados"] == cents // 100
    assert stored_cents(stack, data["tx"]) == cents


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize("importe", ["$\t100", "$\u2003100", "1\u00a0234.00"])
def test_other_spaces_in_an_amount_are_refused(http, key, importe):
    body = json.dumps({"id_externo": "esp-1", "fan": FAN, "importe": importe})
    detalle = assert_error(post(http, key, "/api/v1/tx", body), CodigoError.IMPORTE_INVALIDO)[
        "detalle"
    ]
    assert detalle.startswith("importe: ")
    assert "\n" not in detalle
