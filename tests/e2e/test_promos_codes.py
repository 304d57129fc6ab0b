"""GET /api/v1/promos and POST /api/v1/codes through Envoy: inventories by code state,
admite_codigos, JSON types, aliases, pasted-text splitting, idempotent resends, the
5000-code limit, every error (each changes nothing), permissions, program isolation."""

from __future__ import annotations

import itertools
import time
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from loyalty_grpc.api.backoffice_values import PROMO_STATE
from loyalty_grpc.domain.errors import CodigoError
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as bo
from loyalty_grpc.store.tables import codigos
from tests.e2e.stack import Stack
from tests.e2e.support import assert_error, auth

PROGRAM = "pcod"
OTHER = "pcod2"
_names = itertools.count()


def fan(fan_id: str) -> dict[str, object]:
    return {
        "id": fan_id,
        "nombre": f"Fan {fan_id}",
        "correo": f"{fan_id.lower()}@example.com",
        "socio_desde": 2020,
        "qr_token": f"qr{fan_id}",
    }


FIXTURE_PROMOS: list[dict[str, object]] = [
    {
        "nombre": "Verano",
        "vigencia_fin": "2099-12-31",
        "codigos": [
            {"codigo": "V-1"},
            {"codigo": "V-2"},
            {"codigo": "V-3"},
            {"codigo": "V-4", "estado": "asignado", "fan": "PC01"},
            {"codigo": "V-5", "estado": "canjeado", "fan": "PC01"},
            {"codigo": "V-6", "estado": "canjeado", "fan": "PC02"},
            {"codigo": "V-7", "estado": "liberado"},
        ],
    },
    {
        "nombre": "Cerrada",
        "estado": "terminada",
        "vigencia_fin": "2024-01-31",
        "codigos": [{"codigo": "C-1", "estado": "canjeado", "fan": "PC02"}],
    },
    {"nombre": "Pausa", "estado": "pausada", "vigencia_fin": "2099-06-30"},
]


@pytest.fixture(scope="module")
def keys(stack: Stack) -> dict[str, str]:
    return stack.program(PROGRAM, fans=[fan("PC01"), fan("PC02")], promos=FIXTURE_PROMOS)


@pytest.fixture(scope="module")
def other_keys(stack: Stack, keys: dict[str, str]) -> dict[str, str]:
    return stack.program(
        OTHER,
        fans=[fan("PO01")],
        promos=[{"nombre": "Verano", "vigencia_fin": "2099-12-31", "codigos": [{"codigo": "V-1"}]}],
    )


def listed(http: httpx.Client, key: str) -> list[dict[str, Any]]:
    response = http.get("/api/v1/promos", headers=auth(key))
    assert response.status_code == 200, response.text
    promos: list[dict[str, Any]] = response.json()["data"]["promos"]
    return promos


def by_name(http: httpx.Client, key: str, nombre: str) -> dict[str, Any]:
    return next(p for p in listed(http, key) if p["nombre"] == nombre)


def deposit(http: httpx.Client, key: str, **body: object) -> httpx.Response:
    return http.post("/api/v1/codes", headers=auth(key), json=body)


def ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


def new_promo(stack: Stack, programa: str = PROGRAM, estado: str = "activa") -> tuple[int, str]:
    nombre = f"Promo Depósito {next(_names)}"
    created = stack.admin.stub.CreatePromo(
        bo.CreatePromoRequest(
            programa=programa,
            nombre=nombre,
            vigencia_fin="2099-12-31",
            estado=PROMO_STATE.number(estado),
        ),
        metadata=stack.admin.md,
    )
    return created.promo.id, nombre


def stored(stack: Stack, promo_id: int) -> dict[str, str]:
    with stack.engine.connect() as conn:
        return {
            r.codigo: r.estado
            for r in conn.execute(
                select(codigos.c.codigo, codigos.c.estado).where(codigos.c.promo_id == promo_id)
            )
        }


def total_codes(stack: Stack) -> int:
    with stack.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(codigos)).scalar_one())


def inventory(
    disponibles: int = 0, asignados: int = 0, canjeados: int = 0, liberados: int = 0
) -> dict[str, int]:
    return {
        "disponibles": disponibles,
        "asignados": asignados,
        "canjeados": canjeados,
        "liberados": liberados,
    }


# ---------------------------------------------------------------- promos


def test_promos_lists_every_promotion_with_its_inventory(http, keys):
    response = http.get("/api/v1/promos", headers=auth(keys["todo"]))
    assert response.status_code == 200
    assert response.content.startswith(b'{"ok":true,"data":{"promos":[{"id":')
    promos = listed(http, keys["todo"])
    fixture = [p for p in promos if p["nombre"] in ("Verano", "Cerrada", "Pausa")]
    assert [p["nombre"] for p in fixture] == ["Verano", "Cerrada", "Pausa"]
    ids = [p["id"] for p in promos]
    assert ids == sorted(ids)
    assert all(type(i) is int for i in ids)
    verano, cerrada, pausa = fixture
    assert list(verano) == [
        "id",
        "nombre",
        "estado",
        "vigencia_fin",
        "admite_codigos",
        "inventario",
    ]
    assert verano == {
        "id": verano["id"],
        "nombre": "Verano",
        "estado": "activa",
        "vigencia_fin": "2099-12-31",
        "admite_codigos": True,
        "inventario": inventory(3, 1, 2, 1),
    }
    assert list(verano["inventario"]) == ["disponibles", "asignados", "canjeados", "liberados"]
    assert cerrada == {
        "id": cerrada["id"],
        "nombre": "Cerrada",
        "estado": "terminada",
        "vigencia_fin": "2024-01-31",
        "admite_codigos": False,
        "inventario": inventory(canjeados=1),
    }
    # zero counts and true booleans are printed, never left out
    assert pausa["admite_codigos"] is True
    assert pausa["inventario"] == inventory()


def test_inventory_follows_back_office_assign_and_release(stack, http, keys):
    promo_id, nombre = new_promo(stack)
    ok(deposit(http, keys["todo"], promo=promo_id, codigos=["N-1", "N-2", "N-3", "N-4"]))
    assert by_name(http, keys["todo"], nombre)["inventario"] == inventory(4)
    md = stack.admin.md
    first = stack.admin.stub.AssignNextCode(
        bo.AssignNextCodeRequest(programa=PROGRAM, promo_id=promo_id, fan="pc01"), metadata=md
    ).code
    assert (first.codigo, first.estado, first.fan) == ("N-1", bo.CODE_STATE_ASIGNADO, "PC01")
    stack.admin.stub.ReleaseCode(
        bo.ReleaseCodeRequest(programa=PROGRAM, promo_id=promo_id, codigo="n-3"), metadata=md
    )
    assert by_name(http, keys["todo"], nombre)["inventario"] == inventory(2, 1, 0, 1)
    second = stack.admin.stub.AssignNextCode(
        bo.AssignNextCodeRequest(programa=PROGRAM, promo_id=promo_id, fan="PC02"), metadata=md
    ).code
    assert second.codigo == "N-2"  # oldest disponible first; N-3 was released
    assert by_name(http, keys["todo"], nombre)["inventario"] == inventory(1, 2, 0, 1)


# ---------------------------------------------------------------- codes


def test_deposit_response_shape_and_json_types(stack, http, keys):
    promo_id, nombre = new_promo(stack)
    response = deposit(http, keys["todo"], promo=promo_id, codigos=["hd-1", " HD-2 ", "hd-1"])
    data = ok(response)
    assert response.content.startswith(
        b'{"ok":true,"data":{"promo":{"id":' + str(promo_id).encode() + b',"nombre":'
    )
    assert data == {
        "promo": {"id": promo_id, "nombre": nombre, "estado": "activa"},
        "recibidos": 2,
        "agregados": 2,
        "duplicados": 0,
        "inventario": inventory(2),
    }
    assert stored(stack, promo_id) == {"HD-1": "disponible", "HD-2": "disponible"}


def test_pasted_text_is_split_normalised_and_deduplicated(stack, http, keys):
    promo_id, _ = new_promo(stack)
    data = ok(deposit(http, keys["todo"], promo=promo_id, codigos="A1, a2;A3\n\tA4  a1"))
    assert (data["recibidos"], data["agregados"], data["duplicados"]) == (4, 4, 0)
    assert stored(stack, promo_id) == dict.fromkeys(["A1", "A2", "A3", "A4"], "disponible")


def test_resend_adds_nothing_and_overlaps_count_as_duplicates(stack, http, keys):
    promo_id, _ = new_promo(stack)
    first = ok(deposit(http, keys["todo"], promo=promo_id, codigos=["R1", "R2", "R3"]))
    again = ok(deposit(http, keys["todo"], promo=promo_id, codigos=["r1", "R2", "r3"]))
    assert (again["recibidos"], again["agregados"], again["duplicados"]) == (3, 0, 3)
    assert again["inventario"] == first["inventario"] == inventory(3)
    overlap = ok(deposit(http, keys["todo"], promo=promo_id, codigos="R3 R4 R5"))
    assert (overlap["recibidos"], overlap["agregados"], overlap["duplicados"]) == (3, 2, 1)
    assert overlap["inventario"] == inventory(5)


@pytest.mark.parametrize(
    ("promo_field", "codes_field"),
    [("promo", "codigos"), ("promo_id", "codigos"), ("promo", "codes"), ("promo_id", "codes")],
)
def test_aliases(stack, http, keys, promo_field, codes_field):
    promo_id, _ = new_promo(stack)
    data = ok(deposit(http, keys["todo"], **{promo_field: promo_id, codes_field: ["AL-1"]}))
    assert (data["promo"]["id"], data["agregados"]) == (promo_id, 1)


@pytest.mark.parametrize("reference", ["number", "numeric string", "name", "NAME", " name "])
def test_promo_by_id_or_by_name(stack, http, keys, reference):
    promo_id, nombre = new_promo(stack)
    value: object = {
        "number": promo_id,
        "numeric string": str(promo_id),
        "name": nombre,
        "NAME": nombre.upper(),
        " name ": f"  {nombre.lower()} ",
    }[reference]
    data = ok(deposit(http, keys["todo"], promo=value, codigos=["REF-1"]))
    assert data["promo"] == {"id": promo_id, "nombre": nombre, "estado": "activa"}


def test_a_pausada_promotion_takes_codes(stack, http, keys):
    data = ok(deposit(http, keys["todo"], promo="pausa", codigos=["P-1"]))
    assert (data["promo"]["estado"], data["agregados"]) == ("pausada", 1)


def test_a_test_key_deposits_too(stack, http, keys):
    promo_id, _ = new_promo(stack)
    assert ok(deposit(http, keys["prueba"], promo=promo_id, codigos=["T-1"]))["agregados"] == 1


def test_five_thousand_codes_in_one_call(stack, http, keys):
    promo_id, _ = new_promo(stack)
    batch = [f"BIG-{i:05d}" for i in range(5000)]
    started = time.monotonic()
    data = ok(deposit(http, keys["todo"], promo=promo_id, codigos=batch))
    assert time.monotonic() - started < 10
    assert (data["recibidos"], data["agregados"], data["inventario"]) == (
        5000,
        5000,
        inventory(5000),
    )
    again = ok(deposit(http, keys["todo"], promo=promo_id, codigos="\n".join(batch)))
    assert (again["agregados"], again["duplicados"]) == (0, 5000)


def test_five_thousand_and_one_adds_nothing(stack, http, keys):
    promo_id, _ = new_promo(stack)
    before = total_codes(stack)
    for payload in ([f"M-{i}" for i in range(5001)], " ".join(f"M-{i}" for i in range(5001))):
        error = assert_error(
            deposit(http, keys["todo"], promo=promo_id, codigos=payload),
            CodigoError.DEMASIADOS_CODIGOS,
        )
        assert "5000" in error["detalle"]
    assert total_codes(stack) == before
    assert stored(stack, promo_id) == {}


def _fill(value: object, promo_id: int) -> object:
    """The body with "$ID" replaced by the id of the test's own promotion."""
    if value == "$ID":
        return promo_id
    if isinstance(value, list):
        return [_fill(v, promo_id) for v in value]
    return value


@pytest.mark.parametrize(
    ("body", "codigo", "hint"),
    [
        ({"codigos": ["X"]}, CodigoError.CAMPO_REQUERIDO, "promo"),
        ({"promo": None, "codigos": ["X"]}, CodigoError.CAMPO_REQUERIDO, "promo"),
        ({"promo": "  ", "codigos": ["X"]}, CodigoError.CAMPO_REQUERIDO, "promo"),
        ({"promo": "$ID"}, CodigoError.CAMPO_REQUERIDO, "codigos"),
        ({"promo": "$ID", "codigos": ""}, CodigoError.CAMPO_REQUERIDO, "codigos"),
        ({"promo": "$ID", "codigos": []}, CodigoError.CAMPO_REQUERIDO, "codigos"),
        ({"promo": "$ID", "codigos": " ,; "}, CodigoError.CAMPO_REQUERIDO, "codigos"),
        (
            {"promo": "$ID", "promo_id": "$ID", "codigos": ["X"]},
            CodigoError.SOLICITUD_INVALIDA,
            "promo_id",
        ),
        (
            {"promo": "$ID", "codigos": ["X"], "codes": ["Y"]},
            CodigoError.SOLICITUD_INVALIDA,
            "codes",
        ),
        ({"promo": True, "codigos": ["X"]}, CodigoError.SOLICITUD_INVALIDA, "promo"),
        ({"promo": 1.5, "codigos": ["X"]}, CodigoError.SOLICITUD_INVALIDA, "promo"),
        ({"promo": ["$ID"], "codigos": ["X"]}, CodigoError.SOLICITUD_INVALIDA, "promo"),
        ({"promo": "$ID", "codigos": 12345}, CodigoError.SOLICITUD_INVALIDA, "codigos"),
        ({"promo": "$ID", "codigos": {"a": "b"}}, CodigoError.SOLICITUD_INVALIDA, "codigos"),
        ({"promo": "$ID", "codes": ["OK", 7]}, CodigoError.SOLICITUD_INVALIDA, "codes[1]"),
        (
            {"promo": "$ID", "codigos": ["OK", ""]},
            CodigoError.CODIGO_INVALIDO,
            'codigos[1] "": vacío',
        ),
        ({"promo": "$ID", "codigos": ["OK", "   "]}, CodigoError.CODIGO_INVALIDO, "codigos[1]"),
        ({"promo": "$ID", "codigos": ["OK", "X" * 65]}, CodigoError.CODIGO_INVALIDO, "más de 64"),
        (
            {"promo": "$ID", "codigos": ["OK", "A\u0007B"]},
            CodigoError.CODIGO_INVALIDO,
            'codigos[1] "A\\u0007B": contiene caracteres de control',
        ),
        (
            {"promo": "$ID", "codigos": "OK A\u0000B"},
            CodigoError.CODIGO_INVALIDO,
            "código 2 del texto",
        ),
        ({"promo": "$ID", "codigos": ["OK", "A B"]}, CodigoError.CODIGO_INVALIDO, "separan"),
        ({"promo": 999999, "codigos": ["X"]}, CodigoError.PROMO_NO_ENCONTRADA, "999999"),
        ({"promo": "999999", "codigos": ["X"]}, CodigoError.PROMO_NO_ENCONTRADA, "999999"),
        (
            {"promo_id": 999999, "codes": "X"},
            CodigoError.PROMO_NO_ENCONTRADA,
            "promo_id: el programa no tiene la promoción 999999",
        ),
        ({"promo": 0, "codigos": ["X"]}, CodigoError.PROMO_NO_ENCONTRADA, "promo"),
        ({"promo": "No Existe", "codigos": ["X"]}, CodigoError.PROMO_NO_ENCONTRADA, "No Existe"),
        ({"promo": "cerrada", "codigos": ["X"]}, CodigoError.PROMO_NO_ADMITE_CODIGOS, "terminada"),
    ],
)
def test_errors_change_nothing(stack, http, keys, body, codigo, hint):
    promo_id, _ = new_promo(stack)
    body = {k: _fill(v, promo_id) for k, v in body.items()}
    before = total_codes(stack)
    error = assert_error(deposit(http, keys["todo"], **body), codigo)
    assert hint in error["detalle"]
    assert total_codes(stack) == before


def test_invalid_codes_are_named_first_three_and_nothing_is_added(stack, http, keys):
    promo_id, _ = new_promo(stack)
    batch = ["GOOD-1", "", "GOOD-2", "X" * 80, "B\tC", "\u0001", "ÑU\u0085X", "GOOD-3"]
    error = assert_error(
        deposit(http, keys["todo"], promo=promo_id, codigos=batch), CodigoError.CODIGO_INVALIDO
    )
    detalle = error["detalle"]
    assert detalle.startswith("5 código(s) no válido(s), no se agregó ninguno: codigos[1]")
    assert "codigos[3]" in detalle
    assert 'codigos[4] "B\\tC": contiene caracteres de control' in detalle
    assert "(y 2 más)" in detalle
    assert stored(stack, promo_id) == {}


def test_body_that_is_not_json(http, keys):
    response = http.post(
        "/api/v1/codes",
        headers={**auth(keys["todo"]), "content-type": "application/json"},
        content=b"A1, A2",
    )
    assert_error(response, CodigoError.SOLICITUD_INVALIDA)


def test_authentication(http):
    for method, path in (("GET", "/api/v1/promos"), ("POST", "/api/v1/codes")):
        body = {"promo": 1, "codigos": ["X"]} if method == "POST" else None
        assert_error(http.request(method, path, json=body), CodigoError.NO_AUTENTICADO)
        assert_error(
            http.request(method, path, json=body, headers=auth("lp_vivo_" + "Q" * 30)),
            CodigoError.CLAVE_INVALIDA,
        )


@pytest.mark.parametrize("key_name", ["ping", "tx", "redeem"])
def test_permission(stack, http, keys, key_name):
    promo_id, _ = new_promo(stack)
    for response in (
        http.get("/api/v1/promos", headers=auth(keys[key_name])),
        deposit(http, keys[key_name], promo=promo_id, codigos=["X"]),
    ):
        error = assert_error(response, CodigoError.PERMISO_DENEGADO)
        assert "codigos:escribir" in error["detalle"]
    assert stored(stack, promo_id) == {}


def test_program_isolation(stack, http, keys, other_keys):
    mine = listed(http, other_keys["todo"])
    assert [(p["nombre"], p["inventario"]) for p in mine] == [("Verano", inventory(1))]
    theirs = by_name(http, keys["todo"], "Verano")
    assert theirs["id"] != mine[0]["id"]
    # another program's promotion id is unknown here, and nothing is added to it
    before = stored(stack, int(str(theirs["id"])))
    assert_error(
        deposit(http, other_keys["todo"], promo=theirs["id"], codigos=["Z-1"]),
        CodigoError.PROMO_NO_ENCONTRADA,
    )
    assert stored(stack, int(str(theirs["id"]))) == before
    # a name is looked up in the key's own program only
    data = ok(deposit(http, other_keys["todo"], promo="VERANO", codigos=["V-1", "V-9"]))
    assert (data["promo"]["id"], data["agregados"], data["duplicados"]) == (mine[0]["id"], 1, 1)
    assert stored(stack, int(str(theirs["id"]))) == before
