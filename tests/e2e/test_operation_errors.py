"""Each operation's own codigos (api/operation_errors.py: OWN, and permiso_denegado where
the operation needs a permission) are really what that operation answers, through Envoy:
one call per codigo, against the demo program's fans, codes and promotions. With the
schemathesis run (every real answer is within its operation's codigos), the table neither
misses nor invents an operation's own error. The codigos every call can get (EDGE) are
the gateway's and the interceptors', tested where they are made (test_edge.py,
test_gateway_errors.py, test_strict_json.py, test_rate_limit_http.py…)."""

from __future__ import annotations

import itertools
import json
from importlib import resources
from typing import Any

import httpx
import pytest

from loyalty_grpc.api.operation_errors import OPERATION_ERRORS, OWN
from loyalty_grpc.domain.codes import MAX_CODES_PER_CALL
from loyalty_grpc.domain.errors import CodigoError
from loyalty_grpc.domain.permissions import REQUIRED
from loyalty_grpc.domain.redeem import MAX_CODIGOS
from loyalty_grpc.runtime.gateway.config import find_gateway_dir
from tests.e2e.stack import Stack
from tests.e2e.support import assert_error, auth

PROGRAM = "operr"
C = CodigoError
_ids = itertools.count()
DOCUMENT: dict[str, Any] = json.loads((find_gateway_dir() / "openapi.json").read_bytes())
# operationId -> (HTTP method, path)
BINDING = {
    operation["operationId"]: (verb.upper(), path)
    for path, operations in DOCUMENT["paths"].items()
    for verb, operation in operations.items()
}
HOT_DOG, GORRA = "2x1 Hot Dog", "Gorra Temporada 2024"  # (activa; terminada)


def _sale(**fields: object) -> dict[str, object]:
    return {"id_externo": f"operr-{next(_ids)}", "fan": "DEMO0001", "importe": 10, **fields}


def _without(body: dict[str, object], name: str) -> dict[str, object]:
    return {key: value for key, value in body.items() if key != name}


# (operation, codigo) -> the request (a JSON body, or a GET's query) that gets it.
CALLS: dict[tuple[str, CodigoError], dict[str, object]] = {
    ("ResolveFan", C.CAMPO_REQUERIDO): {},
    ("ResolveFan", C.FAN_NO_ENCONTRADO): {"fan": "NOEXISTE99"},
    ("RegisterTx", C.CAMPO_REQUERIDO): _without(_sale(), "id_externo"),
    ("RegisterTx", C.IMPORTE_INVALIDO): _sale(importe="-1"),
    ("RegisterTx", C.TS_INVALIDO): _sale(ts="ayer"),
    ("RegisterTx", C.MONEDA_NO_SOPORTADA): _sale(moneda="USD"),
    ("RegisterTx", C.FAN_NO_ENCONTRADO): _sale(fan="NOEXISTE99"),
    ("Redeem", C.CAMPO_REQUERIDO): {},
    ("Redeem", C.TS_INVALIDO): {"codigo": "HD-0003", "ts": "ayer"},
    ("Redeem", C.CODIGO_INVALIDO): {"codigo": "X" * 65},
    ("Redeem", C.DEMASIADOS_CODIGOS): {"codigos": [f"C{i}" for i in range(MAX_CODIGOS + 1)]},
    ("Redeem", C.CODIGO_NO_ENCONTRADO): {"codigo": "HD-9999"},
    ("Redeem", C.CODIGO_LIBERADO): {"codigo": "HD-0006"},
    ("Redeem", C.CODIGO_NO_ASIGNADO): {"codigo": "HD-0001"},
    ("DepositCodes", C.CAMPO_REQUERIDO): {"promo": HOT_DOG},
    ("DepositCodes", C.CODIGO_INVALIDO): {"promo": HOT_DOG, "codigos": ["CÓDIGO-1"]},
    ("DepositCodes", C.DEMASIADOS_CODIGOS): {
        "promo": HOT_DOG,
        "codigos": [f"N{i}" for i in range(MAX_CODES_PER_CALL + 1)],
    },
    ("DepositCodes", C.PROMO_NO_ENCONTRADA): {"promo": "No existe", "codigos": ["N-1"]},
    ("DepositCodes", C.PROMO_NO_ADMITE_CODIGOS): {"promo": GORRA, "codigos": ["N-1"]},
    ("Roster", C.CURSOR_INVALIDO): {"desde": "no-es-un-cursor"},
    ("RosterPost", C.CURSOR_INVALIDO): {"desde": "no-es-un-cursor"},
}
# Answered only on a second call (the first applies the sale).
CONFLICT = _sale()


def _demo_program() -> dict[str, Any]:
    text = (resources.files("loyalty_grpc.runtime.cli") / "demo_fixture.json").read_text("utf-8")
    program: dict[str, Any] = json.loads(text)["programas"][0]
    return program


@pytest.fixture(scope="module")
def keys(stack: Stack) -> dict[str, str]:
    demo = _demo_program()
    return stack.program(PROGRAM, fans=demo["fans"], promos=demo["promos"])


def _call(http: httpx.Client, key: str, method: str, request: dict[str, object]) -> httpx.Response:
    verb, path = BINDING[method]
    if verb == "GET":
        return http.get(path, params=request, headers=auth(key))  # type: ignore[arg-type]
    return http.post(path, json=request, headers=auth(key))


def test_every_own_codigo_has_its_call() -> None:
    """The calls below cover each operation's own codigos exactly (a row added to the
    table needs its call here)."""
    covered: dict[str, set[CodigoError]] = {method: set() for method in OWN}
    for method, codigo in CALLS:
        covered[method].add(codigo)
    covered["RegisterTx"].add(C.ID_EXTERNO_EN_CONFLICTO)
    assert covered == {method: set(codigos) for method, codigos in OWN.items()}


@pytest.mark.parametrize(("method", "codigo"), list(CALLS), ids=str)
def test_the_operation_answers_its_own_codigo(
    stack: Stack, http: httpx.Client, keys: dict[str, str], method: str, codigo: CodigoError
) -> None:
    assert codigo in OPERATION_ERRORS[method]
    assert_error(_call(http, keys["todo"], method, CALLS[(method, codigo)]), codigo)


def test_register_tx_answers_id_externo_en_conflicto(
    stack: Stack, http: httpx.Client, keys: dict[str, str]
) -> None:
    assert _call(http, keys["todo"], "RegisterTx", CONFLICT).status_code == 200
    again = {**CONFLICT, "importe": 20}
    assert_error(_call(http, keys["todo"], "RegisterTx", again), C.ID_EXTERNO_EN_CONFLICTO)


@pytest.mark.parametrize("method", list(OPERATION_ERRORS))
def test_permiso_denegado_where_a_permission_is_needed(
    stack: Stack, http: httpx.Client, keys: dict[str, str], method: str
) -> None:
    """The key without permissions: refused by every operation that needs one (and only
    those: the others answer it)."""
    response = _call(http, keys["ping"], method, {})
    if REQUIRED[method] is None:
        assert response.status_code == 200, response.text
    else:
        assert_error(response, C.PERMISO_DENEGADO)
