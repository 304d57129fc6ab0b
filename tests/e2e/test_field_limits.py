"""Every field of every POS request at its largest allowed value, one past it, and a value
big enough to fill gRPC metadata if the server echoed it (issue 22 §4), through the real
Envoy: never a 5xx, the field's own codigo, a detalle within its bound, and the call ran
once — Envoy retried nothing (its cluster's `upstream_rq_retry` is unchanged) and the
server counted exactly one call of the method.

Before: a `tx` whose `moneda` had 13,003 characters or more answered 503: the detalle
repeated the whole value, the error's metadata overflowed Envoy's upstream headers, Envoy
took it for a broken connection and ran the call three times."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from loyalty_grpc.api.edge_limits import BINDINGS
from loyalty_grpc.api.requests import MAX_ID_EXTERNO, MAX_LABEL
from loyalty_grpc.domain.amounts import MAX_CENTAVOS
from loyalty_grpc.domain.amounts import MAX_TEXTO as MAX_IMPORTE_TEXTO
from loyalty_grpc.domain.codes import MAX_CODE_LENGTH, MAX_CODES_PER_CALL
from loyalty_grpc.domain.detalle import MAX_DETALLE
from loyalty_grpc.domain.errors import CATALOGO, CodigoError
from loyalty_grpc.domain.fan_ref import MAX_FAN_TEXT
from loyalty_grpc.domain.integers import INT32_MAX
from loyalty_grpc.domain.promos import MAX_NOMBRE
from loyalty_grpc.domain.redeem import MAX_CODIGOS
from loyalty_grpc.domain.roster import LIMITE_MAX, MAX_LIMITE_TEXTO
from loyalty_grpc.domain.roster_cursor import CURSOR_LENGTH
from loyalty_grpc.domain.timestamps import MAX_TEXTO as MAX_TS_TEXTO
from tests.e2e.stack import Stack
from tests.e2e.support import assert_clean_headers, auth

PROGRAM = "limites"
FAN = "LIM0001"
CORREO = "lim@example.com"
HUGE = 40_000
"""Characters of a value that would fill gRPC metadata if it were echoed (the server's
and Envoy's header limits are 8 KiB to 60 KiB). Where such a body is over its operation's
limit at the gateway (api/edge_limits.py: tx 12 KiB, fan/resolve 8 KiB...), the gateway
refuses it (413 solicitud_muy_grande, from its Content-Length) and the server never runs."""
# The size, path and longest list of the last body a case sent: a body over its
# operation's limit, or a list longer than it takes, is the gateway's to refuse (the same
# demasiados_codigos for too many codes; the server never runs).
SENT: dict[str, Any] = {}
# A code and a promotion name of the largest length, delivered to the fan.
LONG_CODE = "L" * (MAX_CODE_LENGTH - 4) + "0001"
LONG_PROMO = "P" * MAX_NOMBRE
RETRIES = "cluster.loyalty_grpc.upstream_rq_retry"
_ids = itertools.count()

C = CodigoError


@dataclass(frozen=True)
class Limits:
    keys: dict[str, str]
    promo_id: int
    cursor: str


@dataclass(frozen=True)
class Case:
    method: str  # the gRPC method the route calls
    name: str
    send: Callable[[httpx.Client, Limits], httpx.Response]
    codigo: CodigoError | None  # None: 200

    @property
    def id(self) -> str:
        return f"{self.method}-{self.name}"


def post(path: str, body: Callable[[Limits], dict[str, Any]]):
    def send(http: httpx.Client, limits: Limits) -> httpx.Response:
        fields = body(limits)
        content = json.dumps(fields, ensure_ascii=False).encode()
        longest = max((len(v) for v in fields.values() if isinstance(v, list)), default=0)
        SENT.update(path=path, size=len(content), longest=longest)
        return http.post(
            path,
            content=content,
            headers={**auth(limits.keys["todo"]), "Content-Type": "application/json"},
        )

    return send


def get(path: str, params: Callable[[Limits], dict[str, str]]):
    def send(http: httpx.Client, limits: Limits) -> httpx.Response:
        return http.get(path, params=params(limits), headers=auth(limits.keys["todo"]))

    return send


def padded(value: str, length: int) -> str:
    """`value` with spaces after it up to `length` characters (trimmed when read)."""
    return value + " " * (length - len(value))


def sale(**fields: object) -> Callable[[Limits], dict[str, Any]]:
    def body(_: Limits) -> dict[str, Any]:
        return {"id_externo": f"lim-{next(_ids)}", "fan": FAN, "importe": 10, **fields}

    return body


def now_epoch_text(length: int) -> str:
    """This moment's epoch seconds as text of `length` characters (leading zeros)."""
    return str(int(time.time()) - 60).rjust(length, "0")


# ---------------------------------------------------------------- the cases

RESOLVE, TX, REDEEM, CODES, ROSTER, ROSTER_POST, PING = (
    "ResolveFan",
    "RegisterTx",
    "Redeem",
    "DepositCodes",
    "Roster",
    "RosterPost",
    "Ping",
)


def _fan_cases() -> list[Case]:
    cases = []
    bases: list[tuple[str, str, Callable[..., Callable[[Limits], dict[str, Any]]]]] = [
        (RESOLVE, "/api/v1/fan/resolve", lambda **f: lambda _: f),
        (TX, "/api/v1/tx", sale),
    ]
    for method, path, base in bases:
        for field in ("fan", "fan_id", "qr", "codigo"):
            values = [
                ("max", padded(FAN, MAX_FAN_TEXT), None),
                ("max-correo", padded(CORREO, MAX_FAN_TEXT), None),
                ("max-plus-1", padded(FAN, MAX_FAN_TEXT + 1), C.SOLICITUD_INVALIDA),
                ("huge", "H" * HUGE, C.SOLICITUD_INVALIDA),
            ]
            for name, value, codigo in values:
                body = base(**{"fan": None, field: value})
                cases.append(Case(method, f"{field}-{name}", post(path, body), codigo))
    return cases


def _label_cases(method: str, path: str, base, fields: tuple[str, ...]) -> list[Case]:
    cases = []
    for field in fields:
        cases += [
            Case(method, f"{field}-max", post(path, base(**{field: "T" * MAX_LABEL})), None),
            Case(
                method,
                f"{field}-max-plus-1",
                post(path, base(**{field: "T" * (MAX_LABEL + 1)})),
                C.SOLICITUD_INVALIDA,
            ),
            Case(
                method,
                f"{field}-huge",
                post(path, base(**{field: "T" * HUGE})),
                C.SOLICITUD_INVALIDA,
            ),
        ]
    return cases


def _ts_cases(method: str, path: str, base) -> list[Case]:
    return [
        Case(
            method,
            "ts-max",
            post(path, lambda lim: {**base()(lim), "ts": now_epoch_text(MAX_TS_TEXTO)}),
            None,
        ),
        Case(
            method,
            "ts-max-plus-1",
            post(path, lambda lim: {**base()(lim), "ts": now_epoch_text(MAX_TS_TEXTO + 1)}),
            C.TS_INVALIDO,
        ),
        Case(method, "ts-huge", post(path, base(ts="2" * HUGE)), C.TS_INVALIDO),
    ]


def longest_id(field: str) -> Callable[[Limits], dict[str, Any]]:
    """A sale whose id (in `field`) is new and has the largest length."""

    def body(limits: Limits) -> dict[str, Any]:
        new_id = f"lim-{next(_ids)}".ljust(MAX_ID_EXTERNO, "x")
        return {**sale(id_externo=None)(limits), field: new_id}

    return body


def _tx_cases() -> list[Case]:
    path = "/api/v1/tx"
    cases = []
    for field in ("id_externo", "id", "tx_id"):
        cases += [
            Case(
                TX,
                f"{field}-max",
                post(path, longest_id(field)),
                None,
            ),
            Case(
                TX,
                f"{field}-max-plus-1",
                post(path, sale(**{"id_externo": None, field: "x" * (MAX_ID_EXTERNO + 1)})),
                C.SOLICITUD_INVALIDA,
            ),
            Case(
                TX,
                f"{field}-huge",
                post(path, sale(**{"id_externo": None, field: "x" * HUGE})),
                C.SOLICITUD_INVALIDA,
            ),
        ]
    importe_max = "MXN" + " " * (MAX_IMPORTE_TEXTO - 8) + "10.50"
    cases += [
        Case(TX, "importe-text-max", post(path, sale(importe=importe_max)), None),
        Case(
            TX,
            "importe-text-max-plus-1",
            post(path, sale(importe="MXN " + importe_max)),
            C.IMPORTE_INVALIDO,
        ),
        Case(TX, "importe-text-huge", post(path, sale(importe="1" * HUGE)), C.IMPORTE_INVALIDO),
        Case(TX, "importe-number-max", post(path, sale(importe=MAX_CENTAVOS // 100)), None),
        Case(
            TX,
            "importe-number-max-plus-1",
            post(path, sale(importe=MAX_CENTAVOS / 100 + 0.01)),
            C.IMPORTE_INVALIDO,
        ),
        Case(TX, "importe-number-huge", post(path, sale(importe=1e308)), C.IMPORTE_INVALIDO),
        Case(
            TX,
            "importe-list-huge",
            post(path, sale(importe=["1"] * (HUGE // 4))),
            C.IMPORTE_INVALIDO,
        ),
    ]
    for field in ("importe_centavos", "centavos", "amount_cents"):
        cases += [
            Case(TX, f"{field}-max", post(path, sale(importe=None, **{field: MAX_CENTAVOS})), None),
            Case(
                TX,
                f"{field}-max-plus-1",
                post(path, sale(importe=None, **{field: MAX_CENTAVOS + 1})),
                C.IMPORTE_INVALIDO,
            ),
            Case(
                TX,
                f"{field}-huge",
                post(path, sale(importe=None, **{field: "9" * HUGE})),
                C.IMPORTE_INVALIDO,
            ),
        ]
    cases += _label_cases(TX, path, sale, ("terminal", "caja", "sitio", "sucursal"))
    cases += _ts_cases(TX, path, sale)
    cases += [
        Case(TX, "moneda-max", post(path, sale(moneda=" mxn ")), None),
        Case(TX, "moneda-max-plus-1", post(path, sale(moneda="MXNN")), C.MONEDA_NO_SOPORTADA),
        Case(TX, "moneda-13003", post(path, sale(moneda="M" * 13_003)), C.MONEDA_NO_SOPORTADA),
        Case(TX, "moneda-huge", post(path, sale(moneda="\u00d1" * HUGE)), C.MONEDA_NO_SOPORTADA),
    ]
    return cases


def redemption(**fields: object) -> Callable[..., Callable[[Limits], dict[str, Any]]]:
    def base(**more: object) -> Callable[[Limits], dict[str, Any]]:
        return lambda _: {"codigo": LONG_CODE, **fields, **more}

    return base


def _redeem_cases() -> list[Case]:
    path = "/api/v1/redeem"
    single = redemption()
    cases = [
        Case(REDEEM, "codigo-max", post(path, single()), None),
        Case(
            REDEEM,
            "codigo-max-plus-1",
            post(path, single(codigo=LONG_CODE + "X")),
            C.CODIGO_INVALIDO,
        ),
        Case(REDEEM, "codigo-huge", post(path, single(codigo="X" * HUGE)), C.CODIGO_INVALIDO),
        Case(
            REDEEM,
            "codigos-entry-max",
            post(path, single(codigo=None, codigos=[LONG_CODE, "NADA"])),
            None,
        ),
        Case(
            REDEEM,
            "codigos-entry-max-plus-1",
            post(path, single(codigo=None, codigos=["NADA", LONG_CODE + "X"])),
            C.CODIGO_INVALIDO,
        ),
        Case(
            REDEEM,
            "codigos-entry-huge",
            post(path, single(codigo=None, codigos=["X" * HUGE])),
            C.CODIGO_INVALIDO,
        ),
        Case(
            REDEEM,
            "codigos-count-max",
            post(path, single(codigo=None, codigos=[f"N-{i}" for i in range(MAX_CODIGOS)])),
            None,
        ),
        Case(
            REDEEM,
            "codigos-count-max-plus-1",
            post(path, single(codigo=None, codigos=[f"N-{i}" for i in range(MAX_CODIGOS + 1)])),
            C.DEMASIADOS_CODIGOS,
        ),
        Case(
            REDEEM,
            "codigos-count-huge",
            post(path, single(codigo=None, codigos=["N"] * (HUGE // 2))),
            C.DEMASIADOS_CODIGOS,
        ),
    ]
    cases += _label_cases(REDEEM, path, single, ("terminal", "caja"))
    cases += _ts_cases(REDEEM, path, single)
    return cases


def deposit(**fields: object) -> Callable[[Limits], dict[str, Any]]:
    return lambda limits: {"promo": LONG_PROMO, "codigos": ["LIM-DEP-1"], **fields}


def _codes_cases() -> list[Case]:
    path = "/api/v1/codes"
    cases = []
    for field in ("promo", "promo_id"):
        other = {"promo": None} if field != "promo" else {}
        cases += [
            Case(
                CODES,
                f"{field}-text-max",
                post(path, deposit(**other, **{field: padded(LONG_PROMO, MAX_NOMBRE + 3)})),
                None,
            ),
            Case(
                CODES,
                f"{field}-text-max-plus-1",
                post(path, deposit(**other, **{field: LONG_PROMO + "P"})),
                C.SOLICITUD_INVALIDA,
            ),
            Case(
                CODES,
                f"{field}-text-huge",
                post(path, deposit(**other, **{field: "P" * HUGE})),
                C.SOLICITUD_INVALIDA,
            ),
            Case(
                CODES,
                f"{field}-number-max",
                post(path, deposit(**other, **{field: INT32_MAX})),
                C.PROMO_NO_ENCONTRADA,
            ),
            Case(
                CODES,
                f"{field}-number-huge",
                post(path, deposit(**other, **{field: 1e308})),
                C.PROMO_NO_ENCONTRADA,
            ),
        ]
    for field in ("codigos", "codes"):
        other = {"codigos": None} if field != "codigos" else {}
        cases += [
            Case(
                CODES,
                f"{field}-entry-max",
                post(path, deposit(**other, **{field: ["D" * MAX_CODE_LENGTH]})),
                None,
            ),
            Case(
                CODES,
                f"{field}-entry-max-plus-1",
                post(path, deposit(**other, **{field: ["D" * (MAX_CODE_LENGTH + 1)]})),
                C.CODIGO_INVALIDO,
            ),
            Case(
                CODES,
                f"{field}-entry-huge",
                post(path, deposit(**other, **{field: ["D" * HUGE]})),
                C.CODIGO_INVALIDO,
            ),
            Case(
                CODES,
                f"{field}-text-max",
                post(path, deposit(**other, **{field: "A-1, " + "D" * MAX_CODE_LENGTH})),
                None,
            ),
            Case(
                CODES,
                f"{field}-text-max-plus-1",
                post(path, deposit(**other, **{field: "A-1, " + "D" * (MAX_CODE_LENGTH + 1)})),
                C.CODIGO_INVALIDO,
            ),
            Case(
                CODES,
                f"{field}-text-huge",
                post(path, deposit(**other, **{field: "D" * HUGE})),
                C.CODIGO_INVALIDO,
            ),
            Case(
                CODES,
                f"{field}-count-max",
                post(
                    path,
                    deposit(
                        **other,
                        **{field: " ".join(f"M-{i % 7}" for i in range(MAX_CODES_PER_CALL))},
                    ),
                ),
                None,
            ),
            Case(
                CODES,
                f"{field}-count-max-plus-1",
                post(path, deposit(**other, **{field: ["M-1"] * (MAX_CODES_PER_CALL + 1)})),
                C.DEMASIADOS_CODIGOS,
            ),
            Case(
                CODES,
                f"{field}-count-huge",
                post(path, deposit(**other, **{field: "M " * HUGE})),
                C.DEMASIADOS_CODIGOS,
            ),
        ]
    return cases


def _roster_cases() -> list[Case]:
    path = "/api/v1/roster"
    return [
        Case(
            ROSTER, "desde-max", get(path, lambda lim: {"desde": lim.cursor, "limite": "1"}), None
        ),
        Case(
            ROSTER,
            "desde-max-plus-1",
            get(path, lambda lim: {"desde": lim.cursor + "A"}),
            C.CURSOR_INVALIDO,
        ),
        Case(ROSTER, "desde-huge", get(path, lambda _: {"desde": "A" * HUGE}), C.CURSOR_INVALIDO),
        Case(ROSTER, "limite-max", get(path, lambda _: {"limite": str(LIMITE_MAX)}), None),
        Case(
            ROSTER, "limite-text-max", get(path, lambda _: {"limite": "9" * MAX_LIMITE_TEXTO}), None
        ),
        Case(
            ROSTER,
            "limite-text-max-plus-1",
            get(path, lambda _: {"limite": "9" * (MAX_LIMITE_TEXTO + 1)}),
            C.SOLICITUD_INVALIDA,
        ),
        Case(
            ROSTER, "limite-huge", get(path, lambda _: {"limite": "9" * HUGE}), C.SOLICITUD_INVALIDA
        ),
        Case(
            ROSTER_POST,
            "desde-max",
            post(path, lambda lim: {"desde": lim.cursor, "limite": 1}),
            None,
        ),
        Case(
            ROSTER_POST,
            "desde-max-plus-1",
            post(path, lambda lim: {"desde": lim.cursor + "A"}),
            C.CURSOR_INVALIDO,
        ),
        Case(
            ROSTER_POST,
            "desde-huge",
            post(path, lambda _: {"desde": "A" * HUGE}),
            C.CURSOR_INVALIDO,
        ),
        Case(
            ROSTER_POST,
            "desde-number-huge",
            post(path, lambda _: {"desde": 1e308}),
            C.CURSOR_INVALIDO,
        ),
        Case(ROSTER_POST, "limite-max", post(path, lambda _: {"limite": LIMITE_MAX}), None),
        Case(ROSTER_POST, "limite-huge", post(path, lambda _: {"limite": 1e308}), None),
    ]


CASES = [
    *_fan_cases(),
    *_tx_cases(),
    *_redeem_cases(),
    *_codes_cases(),
    *_roster_cases(),
    Case(PING, "unknown-field-huge", post("/api/v1/ping", lambda _: {"x": "A" * HUGE}), None),
]


# ---------------------------------------------------------------- the stack


@pytest.fixture(scope="module")
def limits(stack: Stack) -> Limits:
    keys = stack.program(
        PROGRAM,
        fans=[
            {
                "id": FAN,
                "nombre": "Lim",
                "correo": CORREO,
                "socio_desde": 2020,
                "qr_token": "limQr01",
            }
        ],
        promos=[
            {
                "nombre": LONG_PROMO,
                "vigencia_fin": "2099-12-31",
                "puntos_canje": 1,
                "codigos": [{"codigo": LONG_CODE, "estado": "asignado", "fan": FAN}],
            }
        ],
    )
    with stack.http() as http:
        page = http.post("/api/v1/roster", json={"limite": 1}, headers=auth(keys["todo"]))
        promos = http.get("/api/v1/promos", headers=auth(keys["todo"]))
    cursor = page.json()["data"]["siguiente"]
    assert len(cursor) == CURSOR_LENGTH
    (promo_id,) = [p["id"] for p in promos.json()["data"]["promos"] if p["nombre"] == LONG_PROMO]
    return Limits(keys, promo_id, cursor)


def server_calls(method: str) -> float:
    """Calls of `method` the in-process server has run (its latency histogram's count)."""
    labels = {"method": f"loyalty.v1.PosService/{method}"}
    return REGISTRY.get_sample_value("loyalty_request_seconds_count", labels) or 0.0


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_field_at_its_limit(stack: Stack, http: httpx.Client, limits: Limits, case: Case):
    retries = stack.envoy_counter(RETRIES)
    calls = server_calls(case.method)
    SENT.clear()
    response = case.send(http, limits)
    codigo = case.codigo
    binding = BINDINGS[f"POST {SENT['path']}"] if SENT else None
    over = binding is not None and SENT["size"] > binding.limit
    if over:
        codigo = C.SOLICITUD_MUY_GRANDE  # the gateway's, from the headers
    elif binding is not None and SENT["longest"] > binding.max_elements:
        over = True  # the gateway stops reading the list (its codigo is the case's)
    assert response.status_code < 500, response.text[:500]
    assert_clean_headers(response)
    body = response.json()
    if codigo is None:
        assert response.status_code == 200, response.text[:500]
        assert body["ok"] is True
    else:
        assert response.status_code == CATALOGO[codigo].http, response.text[:500]
        assert body["error"]["codigo"] == codigo.value
        assert len(body["error"]["detalle"]) <= MAX_DETALLE
        for value in (FAN, CORREO, "HHHH"):
            assert value not in body["error"]["detalle"]  # never the fan, never the value
    assert stack.envoy_counter(RETRIES) == retries, "Envoy retried the call"
    expected = calls if over else calls + 1
    assert server_calls(case.method) == expected, "the server did not run the call once"
