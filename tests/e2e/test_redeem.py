"""POST /api/v1/redeem through Envoy: every state of the contract's table, both forms,
normalisation, terminal/caja/ts as stored, test keys, fan.correo and fan:leer, codes in
several promotions, repeats and limits in a batch, every error, and concurrent redemptions."""

from __future__ import annotations

import itertools
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import httpx
import pytest
from sqlalchemy import func, select

from loyalty_grpc.domain.errors import CATALOGO, CodigoError
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pb_grpc
from loyalty_grpc.store.tables import claves, codigos, fans, movimientos, promos
from tests.e2e.stack import Stack
from tests.e2e.support import assert_error, auth

P = "red"
OTRO = "red2"
POOL = 60  # HD-001… : asignado to RED01, one or two per test
LOTE = 501  # L-0001… : asignado to RED02, for the batch limits


def fan(fan_id: str, **extra: object) -> dict[str, object]:
    return {
        "id": fan_id,
        "nombre": f"Fan {fan_id}",
        "correo": f"{fan_id.lower()}@example.com",
        "socio_desde": 2020,
        "temporadas": 1,
        "qr_token": f"qr{fan_id}",
        **extra,
    }


def asignado(codigo: str, fan_id: str) -> dict[str, object]:
    return {"codigo": codigo, "estado": "asignado", "fan": fan_id}


PROMOS: list[dict[str, object]] = [
    {
        "nombre": "Hot Dog",
        "estado": "activa",
        "vigencia_fin": "2099-12-31",
        "puntos_canje": 50,
        "codigos": [
            *(asignado(f"HD-{i:03}", "RED01") for i in range(1, POOL + 1)),
            {"codigo": "HD-D01"},
            {"codigo": "HD-L01", "estado": "liberado", "fan": "RED01"},
            {"codigo": "HD-L02", "estado": "liberado"},
            {"codigo": "HD-C01", "estado": "canjeado", "fan": "RED02"},
            asignado("BAJA-1", "RED03"),
            # One text in several promotions; this promotion's copies are the older ones.
            asignado("MULTI-1", "RED01"),
            {"codigo": "MULTI-2", "estado": "liberado", "fan": "RED01"},
            {"codigo": "MULTI-3"},
            {"codigo": "MULTI-4"},
            {"codigo": "MULTI-5", "estado": "canjeado", "fan": "RED01"},
            asignado("MULTI-6", "RED01"),
        ],
    },
    {
        "nombre": "Gorra",
        "estado": "activa",
        "vigencia_fin": "2099-06-30",
        "puntos_canje": 30,
        "codigos": [
            asignado("MULTI-1", "RED02"),
            {"codigo": "MULTI-2", "estado": "canjeado", "fan": "RED02"},
            {"codigo": "MULTI-3", "estado": "liberado", "fan": "RED02"},
            {"codigo": "MULTI-4"},
            asignado("MULTI-5", "RED02"),
            asignado("MULTI-6", "RED02"),
        ],
    },
    {
        "nombre": "Sin puntos",
        "estado": "activa",
        "vigencia_fin": "2099-12-31",
        "codigos": [asignado("CERO-1", "RED01")],
    },
    {
        "nombre": "Terminada",
        "estado": "terminada",
        "vigencia_fin": "2020-01-01",
        "puntos_canje": 10,
        "codigos": [asignado("TER-1", "RED02")],
    },
    {
        "nombre": "Lote",
        "estado": "activa",
        "vigencia_fin": "2099-12-31",
        "puntos_canje": 1,
        "codigos": [asignado(f"L-{i:04}", "RED02") for i in range(1, LOTE + 1)],
    },
]
_pool = {"next": itertools.count(1)}  # renewed with each database (`keys`)


def fresh() -> str:
    """An `asignado` code of RED01 no other test redeems."""
    number = next(_pool["next"])
    assert number <= POOL, "raise POOL"
    return f"HD-{number:03}"


@pytest.fixture(scope="module")
def keys(stack: Stack) -> dict[str, str]:
    """The module's programs on `stack`, a new pool of `fresh` codes with them (the module's
    tests run on a second database too: tests/citus imports them, one module object)."""
    _pool["next"] = itertools.count(1)
    stack.program(
        OTRO,
        fans=[fan("OTR01")],
        promos=[
            {
                "nombre": "Ajena",
                "vigencia_fin": "2099-12-31",
                "puntos_canje": 5,
                "codigos": [asignado("OTRO-1", "OTR01")],
            }
        ],
    )
    return stack.program(
        P,
        fans=[fan("RED01"), fan("RED02"), fan("RED03", estado="baja", baja_motivo="mudanza")],
        promos=PROMOS,
    )


def redeem(http: httpx.Client, key: str, body: object) -> httpx.Response:
    return http.post("/api/v1/redeem", headers=auth(key), json=body)


def ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert list(body) == ["ok", "data"]
    data: dict[str, Any] = body["data"]
    return data


def balance(stack: Stack, fan_id: str) -> int:
    with stack.engine.connect() as conn:
        return int(
            conn.execute(
                select(fans.c.puntos).where(fans.c.programa_id == P, fans.c.fan_id == fan_id)
            ).scalar_one()
        )


def stored(stack: Stack, codigo: str, promo: str = "Hot Dog") -> dict[str, object]:
    with stack.engine.connect() as conn:
        return dict(
            conn.execute(
                select(codigos)
                .join(
                    promos,
                    (promos.c.programa_id == codigos.c.programa_id)
                    & (promos.c.id == codigos.c.promo_id),
                )
                .where(
                    codigos.c.programa_id == P, codigos.c.codigo == codigo, promos.c.nombre == promo
                )
            )
            .one()
            ._mapping
        )


def credits(stack: Stack, codigo_id: object) -> list[tuple[int, str]]:
    with stack.engine.connect() as conn:
        return [
            (int(r.puntos), r.motivo)
            for r in conn.execute(
                select(movimientos.c.puntos, movimientos.c.motivo).where(
                    movimientos.c.codigo_id == codigo_id
                )
            )
        ]


def key_id(stack: Stack, integracion: str) -> int:
    with stack.engine.connect() as conn:
        return int(
            conn.execute(
                select(claves.c.id).where(
                    claves.c.programa_id == P, claves.c.integracion == integracion
                )
            ).scalar_one()
        )


def ledger_total(stack: Stack) -> int:
    with stack.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(movimientos)).scalar_one())


def correo(fan_id: str) -> dict[str, str]:
    return {"correo": f"{fan_id.lower()}@example.com"}


# ---------------------------------------------------------------- single form


def test_redeem_credits_records_and_then_is_a_duplicate(stack, http, keys):
    codigo = fresh()
    before = balance(stack, "RED01")
    response = redeem(
        http,
        keys["todo"],
        {"codigo": codigo, "terminal": "Caja 3", "ts": "2025-11-20T12:30:00-06:00"},
    )
    data = ok(response)
    assert response.content.startswith(
        b'{"ok":true,"data":{"codigo":"'
        + codigo.encode()
        + b'","estado":"canjeado","duplicado":false,"promo":"Hot Dog",'
    )
    assert list(data) == [
        "codigo",
        "estado",
        "duplicado",
        "promo",
        "fan",
        "puntos_otorgados",
        "puntos_acreditados",
    ]
    assert data == {
        "codigo": codigo,
        "estado": "canjeado",
        "duplicado": False,
        "promo": "Hot Dog",
        "fan": correo("RED01"),
        "puntos_otorgados": 50,
        "puntos_acreditados": 50,
    }
    assert balance(stack, "RED01") == before + 50
    row = stored(stack, codigo)
    assert row["estado"] == "canjeado"
    assert row["canjeado_en"] == datetime(2025, 11, 20, 18, 30, tzinfo=UTC)
    assert row["canje_terminal"] == "Caja 3"
    assert row["canje_clave_id"] == key_id(stack, "Caja todo")
    registrado = row["canje_registrado"]
    assert isinstance(registrado, datetime)
    assert abs(datetime.now(UTC) - registrado) < timedelta(minutes=1)
    assert credits(stack, row["id"]) == [(50, "canje")]

    again = ok(redeem(http, keys["todo"], {"codigo": codigo.lower(), "caja": "Otra"}))
    # The retry: nothing credited now, and what the redemption credited (issue 23 §2).
    assert again == {**data, "duplicado": True, "puntos_otorgados": 0, "puntos_acreditados": 50}
    assert balance(stack, "RED01") == before + 50
    assert stored(stack, codigo) == row  # a duplicate changes nothing
    assert credits(stack, row["id"]) == [(50, "canje")]


@pytest.mark.parametrize("written", ["  {}  ", "{}", "\t{}\n"])
def test_any_case_and_surrounding_spaces(stack, http, keys, written):
    codigo = fresh()
    data = ok(redeem(http, keys["todo"], {"codigo": written.format(codigo.lower())}))
    assert (data["codigo"], data["duplicado"]) == (codigo, False)
    assert stored(stack, codigo)["estado"] == "canjeado"


@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        ("2025-11-20T18:30:00Z", datetime(2025, 11, 20, 18, 30, tzinfo=UTC)),
        ("2025-11-20 18:30:00", datetime(2025, 11, 20, 18, 30, tzinfo=UTC)),
        (1763663400, datetime(2025, 11, 20, 18, 30, tzinfo=UTC)),
        (1763663400000, datetime(2025, 11, 20, 18, 30, tzinfo=UTC)),
    ],
)
def test_ts_formats_and_caja_alias(stack, http, keys, ts, expected):
    codigo = fresh()
    ok(redeem(http, keys["todo"], {"codigo": codigo, "caja": "Caja 9", "ts": ts}))
    row = stored(stack, codigo)
    assert (row["canjeado_en"], row["canje_terminal"]) == (expected, "Caja 9")


def test_without_ts_or_terminal_the_server_time_is_recorded(stack, http, keys):
    codigo = fresh()
    ok(redeem(http, keys["todo"], {"codigo": codigo}))
    row = stored(stack, codigo)
    assert row["canje_terminal"] is None
    assert row["canjeado_en"] == row["canje_registrado"]
    assert isinstance(row["canjeado_en"], datetime)
    assert abs(datetime.now(UTC) - row["canjeado_en"]) < timedelta(minutes=1)


def test_test_key_redeems_without_points(stack, http, keys):
    codigo = fresh()
    before, entries = balance(stack, "RED01"), ledger_total(stack)
    data = ok(redeem(http, keys["prueba"], {"codigo": codigo}))
    assert (data["duplicado"], data["puntos_otorgados"], data["puntos_acreditados"]) == (
        False,
        0,
        0,
    )
    row = stored(stack, codigo)
    assert (row["estado"], row["canje_clave_id"]) == ("canjeado", key_id(stack, "Caja prueba"))
    assert (balance(stack, "RED01"), ledger_total(stack)) == (before, entries)
    # Redeemed for good: a live key now gets the duplicate, still no points.
    live = ok(redeem(http, keys["todo"], {"codigo": codigo}))
    assert (live["duplicado"], live["puntos_otorgados"], live["puntos_acreditados"]) == (True, 0, 0)
    assert balance(stack, "RED01") == before


def test_correo_only_with_fan_leer(stack, http, keys):
    codigo = fresh()
    response = redeem(http, keys["redeem"], {"codigo": codigo})
    data = ok(response)
    assert data["fan"] == {}
    assert b'"fan":{}' in response.content
    assert data["puntos_otorgados"] == 50
    assert ok(redeem(http, keys["redeem"], {"codigo": codigo}))["fan"] == {}


def test_already_redeemed_in_the_fixture(stack, http, keys):
    before = balance(stack, "RED02")
    data = ok(redeem(http, keys["todo"], {"codigo": "hd-c01"}))
    assert data == {
        "codigo": "HD-C01",
        "estado": "canjeado",
        "duplicado": True,
        "promo": "Hot Dog",
        "fan": correo("RED02"),
        "puntos_otorgados": 0,
        # Recorded as canjeado by the fixture: no redemption credited anything.
        "puntos_acreditados": 0,
    }
    assert balance(stack, "RED02") == before


def test_no_other_condition_applies(stack, http, keys):
    """The state table has no condition: a code of a `terminada` promotion, and a code of a
    fan in `baja`, are redeemed and credit like any other; a promotion worth 0 points credits 0."""
    before = balance(stack, "RED02")
    data = ok(redeem(http, keys["todo"], {"codigo": "TER-1"}))
    assert (data["duplicado"], data["promo"], data["puntos_otorgados"]) == (False, "Terminada", 10)
    assert balance(stack, "RED02") == before + 10
    baja = ok(redeem(http, keys["todo"], {"codigo": "BAJA-1"}))
    assert (baja["duplicado"], baja["fan"], baja["puntos_otorgados"]) == (
        False,
        correo("RED03"),
        50,
    )
    entries = ledger_total(stack)
    cero = ok(redeem(http, keys["todo"], {"codigo": "CERO-1"}))
    assert (cero["duplicado"], cero["promo"], cero["puntos_otorgados"]) == (False, "Sin puntos", 0)
    assert stored(stack, "CERO-1", "Sin puntos")["estado"] == "canjeado"
    assert ledger_total(stack) == entries


def test_one_text_in_several_promotions(stack, http, keys):
    """A redeemable (asignado) copy first, oldest first; once all are redeemed, the duplicate
    of the oldest; canjeado before liberado before disponible."""
    red01, red02 = balance(stack, "RED01"), balance(stack, "RED02")
    first = ok(redeem(http, keys["todo"], {"codigo": "multi-1"}))
    assert (first["promo"], first["fan"], first["duplicado"], first["puntos_otorgados"]) == (
        "Hot Dog",
        correo("RED01"),
        False,
        50,
    )
    second = ok(redeem(http, keys["todo"], {"codigo": "MULTI-1"}))
    assert (second["promo"], second["fan"], second["duplicado"], second["puntos_otorgados"]) == (
        "Gorra",
        correo("RED02"),
        False,
        30,
    )
    third = ok(redeem(http, keys["todo"], {"codigo": "MULTI-1"}))
    assert (third["promo"], third["duplicado"], third["puntos_otorgados"]) == ("Hot Dog", True, 0)
    assert (balance(stack, "RED01"), balance(stack, "RED02")) == (red01 + 50, red02 + 30)
    # canjeado (Gorra) before liberado (Hot Dog): the duplicate, not a 409.
    dup = ok(redeem(http, keys["todo"], {"codigo": "MULTI-2"}))
    assert (dup["promo"], dup["duplicado"]) == ("Gorra", True)
    # asignado (Gorra, the newer copy) before canjeado (Hot Dog, the older one).
    newer = ok(redeem(http, keys["todo"], {"codigo": "MULTI-5"}))
    assert (newer["promo"], newer["duplicado"], newer["puntos_otorgados"]) == ("Gorra", False, 30)
    assert stored(stack, "MULTI-5", "Hot Dog")["canje_terminal"] is None


@pytest.mark.parametrize(
    ("codigo", "error"),
    [
        ("HD-L01", CodigoError.CODIGO_LIBERADO),
        ("hd-l02", CodigoError.CODIGO_LIBERADO),  # released before delivery
        ("HD-D01", CodigoError.CODIGO_NO_ASIGNADO),
        ("MULTI-3", CodigoError.CODIGO_LIBERADO),  # liberado (Gorra) before disponible (Hot Dog)
        ("MULTI-4", CodigoError.CODIGO_NO_ASIGNADO),  # disponible in both
        ("NO-EXISTE", CodigoError.CODIGO_NO_ENCONTRADO),
        ("OTRO-1", CodigoError.CODIGO_NO_ENCONTRADO),  # another program's code
        ("HD 001", CodigoError.CODIGO_NO_ENCONTRADO),  # inner spaces are not removed
        ("X" * 65, CodigoError.CODIGO_INVALIDO),  # longer than any code can be
        ("HD-\u0000", CodigoError.CODIGO_NO_ENCONTRADO),
    ],
)
def test_state_errors_change_nothing(stack, http, keys, codigo, error):
    entries = ledger_total(stack)
    with stack.engine.connect() as conn:
        before = conn.execute(select(codigos).order_by(codigos.c.id)).all()
    detalle = assert_error(redeem(http, keys["todo"], {"codigo": codigo}), error)["detalle"]
    assert json.dumps(codigo.strip().upper()[:20])[1:-1] in detalle
    with stack.engine.connect() as conn:
        assert conn.execute(select(codigos).order_by(codigos.c.id)).all() == before
    assert ledger_total(stack) == entries


SEVERAL = (
    '; parecen {n} códigos en un texto: para canjear varios, envíelos como lista en "codigos" '
    '(["A", "B"]), uno por elemento'
)


@pytest.mark.parametrize("separator", [", ", ";", " ", "\n"])
def test_several_codes_in_one_text_point_to_codigos(stack, http, keys, separator):
    """Issue 23 §3: "HD-0101, HD-0102" as `codigo` is looked up as one text (a code stored
    before the separator rule may hold a space), not found, and the detalle says where a
    list of codes goes; nothing is redeemed. Sent as `codigos`, both are."""
    first, second = fresh(), fresh()
    entries = ledger_total(stack)
    response = redeem(http, keys["todo"], {"codigo": f"{first}{separator}{second}"})
    detalle = assert_error(response, CodigoError.CODIGO_NO_ENCONTRADO)["detalle"]
    shown_text = json.dumps(f"{first}{separator}{second}")
    assert detalle == (
        f"codigo {shown_text}: el programa no tiene ese código" + SEVERAL.format(n=2)
    )
    assert stored(stack, first)["estado"] == stored(stack, second)["estado"] == "asignado"
    assert ledger_total(stack) == entries
    data = ok(redeem(http, keys["todo"], {"codigos": [first, second]}))
    assert data["resumen"]["canjeados"] == 2


@pytest.mark.parametrize(
    "codigo",
    [
        "HD 001",  # one code typed with a space (pieces of different lengths)
        "HD-001,",  # one piece
        "HD-001, HD-\u00e9",  # a piece that is no code (not ASCII)
    ],
)
def test_a_text_that_is_not_a_list_gets_no_hint(stack, http, keys, codigo):
    detalle = assert_error(
        redeem(http, keys["todo"], {"codigo": codigo}), CodigoError.CODIGO_NO_ENCONTRADO
    )["detalle"]
    assert "codigos" not in detalle


def test_a_list_too_long_for_one_code_points_to_codigos(stack, http, keys):
    """Over 64 characters a text is no code (400 codigo_invalido); a pasted list says so."""
    text = ", ".join(f"HD-{i:03}" for i in range(1, 11))
    detalle = assert_error(
        redeem(http, keys["todo"], {"codigo": text}), CodigoError.CODIGO_INVALIDO
    )["detalle"]
    assert detalle.endswith(SEVERAL.format(n=10))


@pytest.mark.parametrize(
    ("body", "error", "hint"),
    [
        ({}, CodigoError.CAMPO_REQUERIDO, "codigo"),
        ({"codigo": "   "}, CodigoError.CAMPO_REQUERIDO, "codigo"),
        ({"codigos": []}, CodigoError.CAMPO_REQUERIDO, "codigos"),
        ({"terminal": "Caja 1"}, CodigoError.CAMPO_REQUERIDO, "codigo"),
        ({"codigo": "{c}", "codigos": ["{c}"]}, CodigoError.SOLICITUD_INVALIDA, "codigos"),
        ({"codigo": 5}, CodigoError.SOLICITUD_INVALIDA, ""),
        ({"codigos": [5]}, CodigoError.SOLICITUD_INVALIDA, ""),
        ({"codigo": "{c}", "ts": "mañana"}, CodigoError.TS_INVALIDO, "ts"),
        ({"codigo": "{c}", "ts": "2999-01-01T00:00:00Z"}, CodigoError.TS_INVALIDO, "ts"),
        ({"codigos": ["{c}"], "ts": True}, CodigoError.TS_INVALIDO, "ts"),
        ({"codigo": "{c}", "terminal": "a", "caja": "b"}, CodigoError.SOLICITUD_INVALIDA, "caja"),
        ({"codigo": "{c}", "terminal": "x" * 101}, CodigoError.SOLICITUD_INVALIDA, "terminal"),
        ({"codigos": ["{c}"], "caja": "a\u0001b"}, CodigoError.SOLICITUD_INVALIDA, "caja"),
    ],
)
def test_request_errors_redeem_nothing(stack, http, keys, body, error, hint):
    codigo = fresh()

    def fill(value: object) -> object:
        if isinstance(value, str):
            return value.replace("{c}", codigo)
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    detalle = assert_error(
        redeem(http, keys["todo"], {k: fill(v) for k, v in body.items()}), error
    )["detalle"]
    assert hint in detalle
    assert stored(stack, codigo)["estado"] == "asignado"


def test_permission(stack, http, keys):
    for name in ("tx", "ping"):
        error = assert_error(
            redeem(http, keys[name], {"codigo": "HD-D01"}), CodigoError.PERMISO_DENEGADO
        )
        assert "redeem:escribir" in error["detalle"]
        error = assert_error(
            redeem(http, keys[name], {"codigos": ["HD-D01"]}), CodigoError.PERMISO_DENEGADO
        )


def test_twenty_concurrent_redemptions_credit_once(stack, keys):
    codigo = fresh()
    before = balance(stack, "RED01")
    results: list[httpx.Response] = []
    barrier = threading.Barrier(20)

    def call() -> None:
        with stack.http() as client:
            barrier.wait()
            results.append(redeem(client, keys["todo"], {"codigo": codigo}))

    threads = [threading.Thread(target=call) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    datas = [ok(r) for r in results]
    assert len(datas) == 20
    assert sorted(bool(d["duplicado"]) for d in datas) == [False] + [True] * 19
    assert sum(int(str(d["puntos_otorgados"])) for d in datas) == 50
    assert {d["puntos_acreditados"] for d in datas} == {50}
    assert balance(stack, "RED01") == before + 50
    assert credits(stack, stored(stack, codigo)["id"]) == [(50, "canje")]


# ---------------------------------------------------------------- batch form


def error_entry(codigo: str, error: CodigoError) -> dict[str, object]:
    return {
        "codigo": codigo,
        "ok": False,
        "error": {"codigo": error.value, "mensaje": CATALOGO[error].mensaje},
    }


def test_batch_answers_each_code_as_the_single_form_would(stack, http, keys):
    a, b = fresh(), fresh()
    before = balance(stack, "RED01")
    response = redeem(
        http,
        keys["todo"],
        {
            "codigos": [
                a,
                f"  {b.lower()} ",
                a,
                "HD-L01",
                "HD-D01",
                "NADA",
                "",
                "MULTI-2",
                "hd-c01",
                b,
            ],
            "terminal": "Caja 5",
            "ts": "2025-11-20 18:30:00",
        },
    )
    data = ok(response)
    assert response.content.startswith(
        b'{"ok":true,"data":{"resumen":{"recibidos":10,"canjeados":2,"duplicados":4,'
        b'"rechazados":4},"resultados":[{'
    )
    assert list(data) == ["resumen", "resultados"]
    assert data["resumen"] == {"recibidos": 10, "canjeados": 2, "duplicados": 4, "rechazados": 4}

    def redeemed(
        codigo: str,
        duplicado: bool,
        promo: str = "Hot Dog",
        fan_id: str = "RED01",
        acreditados: int = 50,
    ) -> dict[str, object]:
        return {
            "codigo": codigo,
            "ok": True,
            "estado": "canjeado",
            "duplicado": duplicado,
            "promo": promo,
            "fan": correo(fan_id),
            "puntos_otorgados": 0 if duplicado else 50,
            "puntos_acreditados": acreditados,
        }

    assert data["resultados"] == [
        redeemed(a, False),
        redeemed(b, False),
        redeemed(a, True),
        error_entry("HD-L01", CodigoError.CODIGO_LIBERADO),
        error_entry("HD-D01", CodigoError.CODIGO_NO_ASIGNADO),
        error_entry("NADA", CodigoError.CODIGO_NO_ENCONTRADO),
        error_entry("", CodigoError.CODIGO_NO_ENCONTRADO),
        # Recorded as canjeado by the fixture: no redemption credited anything.
        redeemed("MULTI-2", True, "Gorra", "RED02", acreditados=0),
        redeemed("HD-C01", True, fan_id="RED02", acreditados=0),
        redeemed(b, True),
    ]
    assert balance(stack, "RED01") == before + 100
    for codigo in (a, b):
        row = stored(stack, codigo)
        assert (row["estado"], row["canje_terminal"], row["canjeado_en"]) == (
            "canjeado",
            "Caja 5",
            datetime(2025, 11, 20, 18, 30, tzinfo=UTC),
        )
        assert credits(stack, row["id"]) == [(50, "canje")]
    assert stored(stack, "HD-L01")["estado"] == "liberado"
    assert stored(stack, "HD-D01")["estado"] == "disponible"


def test_batch_entry_fields(stack, http, keys):
    """Each entry is a google.protobuf.Struct (a map): its fields are exactly these, in no
    guaranteed order."""
    response = redeem(http, keys["todo"], {"codigos": [fresh(), "NADA"]})
    entries = ok(response)["resultados"]
    assert isinstance(entries, list)
    assert set(entries[0]) == {
        "codigo",
        "ok",
        "estado",
        "duplicado",
        "promo",
        "fan",
        "puntos_otorgados",
        "puntos_acreditados",
    }
    assert set(entries[1]) == {"codigo", "ok", "error"}
    assert set(entries[1]["error"]) == {"codigo", "mensaje"}
    assert isinstance(entries[0]["puntos_otorgados"], int)


def test_batch_repeats_a_text_in_several_promotions(stack, http, keys):
    """A text repeated in a batch is answered as successive single redemptions: the older
    asignado copy, then the newer one, then the duplicate of the older."""
    red01, red02 = balance(stack, "RED01"), balance(stack, "RED02")
    data = ok(
        redeem(
            http,
            keys["todo"],
            {"codigos": ["MULTI-6", "multi-6", " MULTI-6 ", "MULTI-3", "MULTI-4", "OTRO-1"]},
        )
    )
    assert [
        (
            e["codigo"],
            e.get("promo"),
            e.get("duplicado"),
            e.get("puntos_otorgados"),
            e.get("puntos_acreditados"),
        )
        for e in data["resultados"]
    ] == [
        ("MULTI-6", "Hot Dog", False, 50, 50),
        ("MULTI-6", "Gorra", False, 30, 30),
        # The duplicate of the Hot Dog copy, redeemed by the first entry of this batch.
        ("MULTI-6", "Hot Dog", True, 0, 50),
        ("MULTI-3", None, None, None, None),
        ("MULTI-4", None, None, None, None),
        ("OTRO-1", None, None, None, None),
    ]
    assert data["resultados"][1]["fan"] == correo("RED02")
    assert data["resultados"][3:] == [
        error_entry("MULTI-3", CodigoError.CODIGO_LIBERADO),
        error_entry("MULTI-4", CodigoError.CODIGO_NO_ASIGNADO),
        error_entry("OTRO-1", CodigoError.CODIGO_NO_ENCONTRADO),
    ]
    assert data["resumen"] == {"recibidos": 6, "canjeados": 2, "duplicados": 1, "rechazados": 3}
    assert (balance(stack, "RED01"), balance(stack, "RED02")) == (red01 + 50, red02 + 30)


def test_a_string_in_codigos_is_refused(stack, http, keys):
    """The contract's `codigos` is string[]: protobuf's JSON reader would take a lone string
    as a list of one; the gateway's request check refuses it, and nothing is redeemed."""
    codigo = fresh()
    before = balance(stack, "RED01")
    detalle = assert_error(
        redeem(http, keys["todo"], {"codigos": codigo.lower()}), CodigoError.SOLICITUD_INVALIDA
    )["detalle"]
    assert detalle == "codigos: debe ser una lista de textos; llegó un texto"
    assert stored(stack, codigo)["estado"] == "asignado"
    assert balance(stack, "RED01") == before


def test_batch_without_fan_leer_and_with_a_test_key(stack, http, keys):
    a, b = fresh(), fresh()
    before = balance(stack, "RED01")
    plain = ok(redeem(http, keys["redeem"], {"codigos": [a]}))["resultados"]
    assert plain == [
        {
            "codigo": a,
            "ok": True,
            "estado": "canjeado",
            "duplicado": False,
            "promo": "Hot Dog",
            "fan": {},
            "puntos_otorgados": 50,
            "puntos_acreditados": 50,
        }
    ]
    test = ok(redeem(http, keys["prueba"], {"codigos": [b, b]}))
    assert [
        (e["duplicado"], e["puntos_otorgados"], e["puntos_acreditados"]) for e in test["resultados"]
    ] == [(False, 0, 0), (True, 0, 0)]
    assert test["resumen"] == {"recibidos": 2, "canjeados": 1, "duplicados": 1, "rechazados": 0}
    assert stored(stack, b)["estado"] == "canjeado"
    assert balance(stack, "RED01") == before + 50


def test_batch_limit(stack, http, keys):
    lote = [f"L-{i:04}" for i in range(1, LOTE + 1)]
    before, entries = balance(stack, "RED02"), ledger_total(stack)
    detalle = assert_error(
        redeem(http, keys["todo"], {"codigos": lote}), CodigoError.DEMASIADOS_CODIGOS
    )["detalle"]
    assert "500" in detalle
    assert (balance(stack, "RED02"), ledger_total(stack)) == (before, entries)
    with stack.engine.connect() as conn:
        states = conn.execute(
            select(codigos.c.estado, func.count())
            .where(codigos.c.codigo.like("L-%"), codigos.c.programa_id == P)
            .group_by(codigos.c.estado)
        ).all()
    assert states == [("asignado", LOTE)]
    # 500 is allowed, repeats counted as entries.
    data = ok(redeem(http, keys["todo"], {"codigos": [*lote[:499], lote[0]]}))
    assert data["resumen"] == {"recibidos": 500, "canjeados": 499, "duplicados": 1, "rechazados": 0}
    assert balance(stack, "RED02") == before + 499
    assert ledger_total(stack) == entries + 499


def test_single_and_batch_over_native_grpc_leave_the_other_form_unset(stack, keys):
    codigo = fresh()
    with grpc.insecure_channel(stack.grpc_target) as channel:
        stub = pb_grpc.PosServiceStub(channel)
        md = (("authorization", f"Bearer {keys['redeem']}"),)
        single = stub.Redeem(pb.RedeemRequest(codigo=codigo), metadata=md).data
        assert (single.duplicado, single.puntos_otorgados, single.puntos_acreditados) == (
            False,
            50,
            50,
        )
        assert single.HasField("codigo")
        assert single.HasField("fan")
        assert not single.fan.HasField("correo")
        assert not single.HasField("resumen")
        assert not single.HasField("resultados")
        batch = stub.Redeem(pb.RedeemRequest(codigos=[codigo]), metadata=md).data
        assert batch.HasField("resumen")
        assert batch.HasField("resultados")
        assert not any(
            batch.HasField(f)
            for f in (
                "codigo",
                "estado",
                "duplicado",
                "promo",
                "fan",
                "puntos_otorgados",
                "puntos_acreditados",
            )
        )
        [entry] = batch.resultados.values
        fields = entry.struct_value.fields
        assert fields["duplicado"].bool_value is True
        assert (
            fields["puntos_otorgados"].number_value,
            fields["puntos_acreditados"].number_value,
        ) == (
            0,
            50,
        )
        retry = stub.Redeem(pb.RedeemRequest(codigo=codigo), metadata=md).data
        assert (retry.duplicado, retry.puntos_otorgados, retry.puntos_acreditados) == (True, 0, 50)
        assert retry.HasField("puntos_acreditados")
        with pytest.raises(grpc.RpcError) as err:
            stub.Redeem(pb.RedeemRequest(codigo="HD-L01"), metadata=md)
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
