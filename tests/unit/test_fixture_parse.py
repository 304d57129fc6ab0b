"""parse_fixture: a valid fixture becomes frozen dataclasses; every malformed one fails with
the exact error code and a one-line detalle naming the entry and the field, never the key."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import loyalty_grpc.runtime.cli
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.fixture import (
    ClaveFixture,
    CodigoFixture,
    FanFixture,
    Fixture,
    ProgramaFixture,
    PromoFixture,
    parse_fixture,
)
from loyalty_grpc.domain.keys import Modo
from loyalty_grpc.domain.permissions import Permiso
from loyalty_grpc.domain.promos import EstadoCodigo, EstadoFan, EstadoPromo

KEY = "lp_vivo_Q7hk2PzTt9wXcV4bN8mL1sRa"
KEY_PRUEBA = "lp_prueba_Zz0Yy1Xx2Ww3Vv4Uu5Tt6Ss7"
KEY_OTRO = "lp_vivo_OtroPrograma00000000000000000"
SECRETS = (KEY, KEY_PRUEBA, KEY_OTRO)
P = "programas[0] (halcones)"


def valid() -> dict[str, Any]:
    return {
        "programas": [
            {
                "id": "halcones",
                "nombre": " Club Halcones ",
                "tasa_puntos": 0.1,
                "qr_url": "https://halcones.example/fan",
                "claves": [
                    {
                        "clave": KEY,
                        "integracion": "Caja Norte",
                        "permisos": ["fan:leer", "tx:escribir", "fan:leer"],
                    },
                    {"clave": KEY_PRUEBA, "integracion": "Pruebas", "permisos": []},
                ],
                "fans": [
                    {
                        "id": "hal 0001",
                        "nombre": "Ana",
                        "correo": "Ana@Example.com",
                        "socio_desde": 2018,
                        "temporadas": 5,
                        "qr_token": "q7Hk2Pz",
                        "puntos": 100,
                        "estado": "activo",
                    },
                    {
                        "id": "HAL0002",
                        "nombre": "Beto",
                        "correo": "beto@example.com",
                        "socio_desde": 2020,
                        "qr_token": "x-9_Y.z~",
                        "estado": "baja",
                        "baja_motivo": "solicitud del socio",
                    },
                ],
                "promos": [
                    {
                        "nombre": "2x1 Hot Dog",
                        "descripcion": "Dos por uno.\nEn el estadio.",
                        "estado": "activa",
                        "vigencia_fin": "2099-12-31",
                        "puntos_canje": 50,
                        "codigos": [
                            {"codigo": "HD-0001", "estado": "asignado", "fan": "hal0001"},
                            {"codigo": " hd-0002 "},
                            {"codigo": "HD-0003", "estado": "canjeado", "fan": "HAL9999"},
                            {"codigo": "HD-0004", "estado": "liberado"},
                        ],
                    },
                    {"nombre": "Gorra", "vigencia_fin": "2024-01-31", "estado": "terminada"},
                ],
            },
            {
                "id": "otro",
                "nombre": "Otro",
                "tasa_puntos": "1",
                "claves": [{"clave": KEY_OTRO, "integracion": "Caja", "permisos": ["roster:leer"]}],
                "fans": [
                    {
                        "id": "HAL0001",
                        "nombre": "Ana",
                        "correo": "ana@example.com",
                        "socio_desde": 2018,
                        "qr_token": "q7Hk2Pz",
                    }
                ],
            },
        ]
    }


def test_valid_fixture_parses_with_defaults_and_normalisation() -> None:
    fixture = parse_fixture(json.dumps(valid()))
    halcones = ProgramaFixture(
        ruta=P,
        id="halcones",
        nombre="Club Halcones",
        tasa_puntos=Decimal("0.1"),
        qr_url="https://halcones.example/fan",
        claves=(
            ClaveFixture(
                f"{P}.claves[0] (Caja Norte)",
                KEY,
                Modo.VIVO,
                "Caja Norte",
                frozenset({Permiso.FAN_LEER, Permiso.TX_ESCRIBIR}),
            ),
            ClaveFixture(
                f"{P}.claves[1] (Pruebas)", KEY_PRUEBA, Modo.PRUEBA, "Pruebas", frozenset()
            ),
        ),
        fans=(
            FanFixture(
                f"{P}.fans[0] (HAL0001)",
                "HAL0001",
                "Ana",
                "Ana@Example.com",
                2018,
                5,
                "q7Hk2Pz",
                100,
                EstadoFan.ACTIVO,
                None,
            ),
            FanFixture(
                f"{P}.fans[1] (HAL0002)",
                "HAL0002",
                "Beto",
                "beto@example.com",
                2020,
                0,
                "x-9_Y.z~",
                0,
                EstadoFan.BAJA,
                "solicitud del socio",
            ),
        ),
        promos=(
            PromoFixture(
                f"{P}.promos[0] (2x1 Hot Dog)",
                "2x1 Hot Dog",
                "Dos por uno.\nEn el estadio.",
                EstadoPromo.ACTIVA,
                date(2099, 12, 31),
                50,
                (
                    CodigoFixture(
                        f"{P}.promos[0] (2x1 Hot Dog).codigos[0] (HD-0001)",
                        "HD-0001",
                        EstadoCodigo.ASIGNADO,
                        "HAL0001",
                    ),
                    CodigoFixture(
                        f"{P}.promos[0] (2x1 Hot Dog).codigos[1] (HD-0002)",
                        "HD-0002",
                        EstadoCodigo.DISPONIBLE,
                        None,
                    ),
                    # A fan outside the fixture may be in the database: apply checks it.
                    CodigoFixture(
                        f"{P}.promos[0] (2x1 Hot Dog).codigos[2] (HD-0003)",
                        "HD-0003",
                        EstadoCodigo.CANJEADO,
                        "HAL9999",
                    ),
                    CodigoFixture(
                        f"{P}.promos[0] (2x1 Hot Dog).codigos[3] (HD-0004)",
                        "HD-0004",
                        EstadoCodigo.LIBERADO,
                        None,
                    ),
                ),
            ),
            PromoFixture(
                f"{P}.promos[1] (Gorra)",
                "Gorra",
                "",
                EstadoPromo.TERMINADA,
                date(2024, 1, 31),
                0,
                (),
            ),
        ),
    )
    assert fixture.programas[0] == halcones
    otro = fixture.programas[1]
    # Fan IDs, e-mails and QR tokens are unique per program, not across programs.
    assert otro.fans[0].fan_id == "HAL0001"
    assert otro.tasa_puntos == Decimal(1)
    assert otro.qr_url == ""
    assert otro.promos == ()
    assert isinstance(fixture, Fixture)
    # The key is a secret: not in the dataclass's repr.
    assert KEY not in repr(fixture)


def test_decimal_rate_is_exact_never_float() -> None:
    doc = json.dumps(valid()).replace('"tasa_puntos": 0.1', '"tasa_puntos": 0.123456')
    assert parse_fixture(doc).programas[0].tasa_puntos == Decimal("0.123456")


def test_integers_are_json_numbers_with_an_integer_value() -> None:
    """`2018.0` is the integer 2018 here as in every request field (domain.integers)."""
    doc = valid()
    doc["programas"][0]["fans"][1]["socio_desde"] = 2018.0
    doc["programas"][0]["fans"][1]["puntos"] = 1.5e2
    fan = parse_fixture(json.dumps(doc)).programas[0].fans[1]
    assert (fan.socio_desde, fan.puntos) == (2018, 150)
    assert isinstance(fan.socio_desde, int)
    assert isinstance(fan.puntos, int)


def test_empty_program_list_is_valid() -> None:
    assert parse_fixture('{"programas": []}') == Fixture(())


def test_demo_fixture_parses() -> None:
    path = Path(loyalty_grpc.runtime.cli.__file__).parent / "demo_fixture.json"
    demo = parse_fixture(path.read_text()).programas[0]
    assert (demo.id, demo.nombre, demo.tasa_puntos) == ("demo", "Club Demo", Decimal("0.1"))
    assert [c.modo for c in demo.claves] == [Modo.VIVO, Modo.PRUEBA, Modo.VIVO, Modo.VIVO]
    assert demo.claves[0].permisos == frozenset(Permiso) == demo.claves[1].permisos
    assert demo.claves[2].integracion == "Kiosko Ping"
    assert demo.claves[2].permisos == frozenset()
    assert demo.claves[3].permisos == frozenset({Permiso.TX_ESCRIBIR})
    assert len(demo.fans) == 5
    assert [f.estado for f in demo.fans].count(EstadoFan.BAJA) == 1
    assert all(f.correo.endswith("@example.com") for f in demo.fans)
    activa, terminada = demo.promos
    assert activa.estado is EstadoPromo.ACTIVA
    assert terminada.estado is EstadoPromo.TERMINADA
    assert {c.estado for c in activa.codigos} == set(EstadoCodigo)


# --- malformed documents ------------------------------------------------------------------

Mutate = Callable[[dict[str, Any]], object]


def _set(path: tuple[Any, ...], value: Any) -> Mutate:
    def mutate(doc: dict[str, Any]) -> None:
        target: Any = doc
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return mutate


def _del(path: tuple[Any, ...]) -> Mutate:
    def mutate(doc: dict[str, Any]) -> None:
        target: Any = doc
        for step in path[:-1]:
            target = target[step]
        del target[path[-1]]

    return mutate


def _append(path: tuple[Any, ...], value: Any) -> Mutate:
    def mutate(doc: dict[str, Any]) -> None:
        target: Any = doc
        for step in path:
            target = target[step]
        target.append(value)

    return mutate


PROG = ("programas", 0)
FAN0 = (*PROG, "fans", 0)
FAN1 = (*PROG, "fans", 1)
PROMO0 = (*PROG, "promos", 0)
COD0 = (*PROMO0, "codigos", 0)
NEW_FAN = {
    "id": "HAL0003",
    "nombre": "Caro",
    "correo": "caro@example.com",
    "socio_desde": 2021,
    "qr_token": "caro1",
}
H = "programas[0] (halcones).promos[0] (2x1 Hot Dog)"
F = CodigoError.FIXTURE_INVALIDO

# (case id, mutation of the valid document, expected code, text the detalle contains)
CASES: list[tuple[str, Mutate, CodigoError, str]] = [
    ("programas falta", _del(("programas",)), F, "programas: falta el campo"),
    ("programas no lista", _set(("programas",), {}), F, "programas: debe ser una lista"),
    ("campo raíz desconocido", _set(("programa",), []), F, "programa: campo desconocido"),
    ("programa no objeto", _set(PROG, "halcones"), F, "programas[0]: debe ser un objeto"),
    ("programa sin id", _del((*PROG, "id")), F, "programas[0].id: falta el campo"),
    ("programa id con mayúsculas", _set((*PROG, "id"), "Halcones"), F, "programas[0].id: "),
    ("programa id número", _set((*PROG, "id"), 7), F, "programas[0].id: debe ser texto"),
    ("programa sin nombre", _del((*PROG, "nombre")), F, f"{P}.nombre: falta el campo"),
    ("programa nombre vacío", _set((*PROG, "nombre"), "  "), F, f"{P}.nombre: vacío"),
    (
        "programa campo desconocido",
        _set((*PROG, "tasa"), 1),
        F,
        "programas[0].tasa: campo desconocido",
    ),
    ("tasa falta", _del((*PROG, "tasa_puntos")), F, f"{P}.tasa_puntos: falta el campo"),
    (
        "tasa texto",
        _set((*PROG, "tasa_puntos"), "diez"),
        F,
        f'{P}.tasa_puntos: no es un número decimal (recibido "diez")',
    ),
    ("tasa negativa", _set((*PROG, "tasa_puntos"), "-0.1"), F, f"{P}.tasa_puntos: "),
    (
        "tasa 7 decimales",
        _set((*PROG, "tasa_puntos"), "0.1234567"),
        F,
        f'{P}.tasa_puntos: a lo más 6 decimales (recibido "0.1234567")',
    ),
    ("tasa enorme", _set((*PROG, "tasa_puntos"), 1e9), F, f"{P}.tasa_puntos: "),
    (
        "tasa booleana",
        _set((*PROG, "tasa_puntos"), True),
        F,
        f"{P}.tasa_puntos: debe ser un número o texto decimal, no un booleano",
    ),
    ("tasa NaN", _set((*PROG, "tasa_puntos"), "NaN"), F, f"{P}.tasa_puntos: "),
    ("qr_url no http", _set((*PROG, "qr_url"), "halcones.example"), F, f"{P}.qr_url: "),
    (
        "programa repetido",
        _append(("programas",), {"id": "halcones", "nombre": "B", "tasa_puntos": 1}),
        F,
        f"programas[2] (halcones).id: id de programa repetido; ya aparece en {P}",
    ),
    # keys
    (
        "clave mal formada",
        _set((*PROG, "claves", 0, "clave"), "lp_vivo_corta"),
        CodigoError.CLAVE_MAL_FORMADA,
        f"{P}.claves[0].clave: ",
    ),
    (
        "clave prefijo malo",
        _set((*PROG, "claves", 0, "clave"), KEY.replace("vivo", "live")),
        CodigoError.CLAVE_MAL_FORMADA,
        f"{P}.claves[0].clave: ",
    ),
    ("clave falta", _del((*PROG, "claves", 0, "clave")), F, f"{P}.claves[0].clave: falta el campo"),
    (
        "clave número",
        _set((*PROG, "claves", 0, "clave"), 123),
        F,
        f"{P}.claves[0].clave: debe ser texto",
    ),
    (
        "integracion falta",
        _del((*PROG, "claves", 0, "integracion")),
        F,
        f"{P}.claves[0].integracion: falta el campo",
    ),
    (
        "permisos faltan",
        _del((*PROG, "claves", 0, "permisos")),
        F,
        f"{P}.claves[0] (Caja Norte).permisos: falta el campo",
    ),
    (
        "permiso desconocido",
        _set((*PROG, "claves", 0, "permisos"), ["fan:leer", "fan:ler"]),
        CodigoError.PERMISO_DESCONOCIDO,
        f"{P}.claves[0] (Caja Norte).permisos[1]: ",
    ),
    (
        "permiso no texto",
        _set((*PROG, "claves", 0, "permisos"), [1]),
        F,
        f"{P}.claves[0] (Caja Norte).permisos[0]: debe ser texto",
    ),
    (
        "clave repetida entre programas",
        _set(("programas", 1, "claves", 0, "clave"), KEY),
        F,
        f"programas[1] (otro).claves[0] (Caja).clave: clave repetida; ya aparece en "
        f"{P}.claves[0] (Caja Norte)",
    ),
    (
        "clave como nombre de campo",
        _set((*PROG, "claves", 0, KEY), 1),
        F,
        f"{P}.claves[0].(valor oculto): campo desconocido",
    ),
    (
        "clave en otro campo",
        _set((*PROG, "claves", 0, "integracion"), [KEY]),
        F,
        f"{P}.claves[0].integracion: debe ser texto",
    ),
    # fans
    ("fan no objeto", _set((*PROG, "fans", 1), []), F, f"{P}.fans[1]: debe ser un objeto"),
    ("fan sin id", _del((*FAN1, "id")), F, f"{P}.fans[1].id: falta el campo"),
    ("fan id vacío", _set((*FAN1, "id"), " \t"), F, f"{P}.fans[1].id: "),
    ("fan id con arroba", _set((*FAN1, "id"), "a@b"), F, f"{P}.fans[1].id: "),
    ("fan sin correo", _del((*FAN1, "correo")), F, f"{P}.fans[1] (HAL0002).correo: falta el campo"),
    (
        "correo inválido",
        _set((*FAN1, "correo"), "beto at example.com"),
        F,
        f"{P}.fans[1] (HAL0002).correo: no es un correo válido",
    ),
    ("fan sin nombre", _del((*FAN1, "nombre")), F, f"{P}.fans[1] (HAL0002).nombre: falta"),
    (
        "nombre con control",
        _set((*FAN1, "nombre"), "Be\x00to"),
        F,
        f"{P}.fans[1] (HAL0002).nombre: contiene caracteres de control",
    ),
    (
        "socio_desde falta",
        _del((*FAN1, "socio_desde")),
        F,
        f"{P}.fans[1] (HAL0002).socio_desde: falta el campo",
    ),
    (
        "socio_desde decimal",
        _set((*FAN1, "socio_desde"), 2018.5),
        F,
        f"{P}.fans[1] (HAL0002).socio_desde: debe ser un número entero, no un número con",
    ),
    (
        "socio_desde texto",
        _set((*FAN1, "socio_desde"), "2018"),
        F,
        f"{P}.fans[1] (HAL0002).socio_desde: debe ser un número entero, no texto",
    ),
    (
        "socio_desde fuera de rango",
        _set((*FAN1, "socio_desde"), 18),
        F,
        f"{P}.fans[1] (HAL0002).socio_desde: debe ser un año entre 1900 y 2100 (recibido 18)",
    ),
    (
        "temporadas negativas",
        _set((*FAN1, "temporadas"), -1),
        F,
        f"{P}.fans[1] (HAL0002).temporadas: no puede ser negativo (recibido -1)",
    ),
    (
        "puntos booleano",
        _set((*FAN1, "puntos"), True),
        F,
        f"{P}.fans[1] (HAL0002).puntos: debe ser un número entero, no un booleano",
    ),
    ("puntos negativos", _set((*FAN1, "puntos"), -5), F, f"{P}.fans[1] (HAL0002).puntos: "),
    (
        "puntos null",
        _set((*FAN1, "puntos"), None),
        F,
        f"{P}.fans[1] (HAL0002).puntos: debe ser un número entero, no null",
    ),
    (
        "qr_token falta",
        _del((*FAN1, "qr_token")),
        F,
        f"{P}.fans[1] (HAL0002).qr_token: falta el campo",
    ),
    (
        "qr_token con barra",
        _set((*FAN1, "qr_token"), "a/b"),
        F,
        f"{P}.fans[1] (HAL0002).qr_token: ",
    ),
    (
        "estado desconocido",
        _set((*FAN1, "estado"), "bja"),
        F,
        f"{P}.fans[1] (HAL0002).estado: debe ser uno de activo, baja",
    ),
    (
        "baja sin motivo",
        _del((*FAN1, "baja_motivo")),
        F,
        f"{P}.fans[1] (HAL0002).baja_motivo: falta el campo",
    ),
    (
        "motivo sin baja",
        _set((*FAN0, "baja_motivo"), "x"),
        F,
        f"{P}.fans[0] (HAL0001).baja_motivo: solo va con estado baja",
    ),
    (
        "fan campo desconocido",
        _set((*FAN1, "correo_e"), "x"),
        F,
        f"{P}.fans[1].correo_e: campo desconocido",
    ),
    (
        "fan id repetido",
        _append((*PROG, "fans"), {**NEW_FAN, "id": "Hal0002"}),
        F,
        f"{P}.fans[2] (HAL0002).id: Fan ID repetido; ya aparece en {P}.fans[1] (HAL0002)",
    ),
    (
        "correo repetido",
        _append((*PROG, "fans"), {**NEW_FAN, "correo": "BETO@example.COM"}),
        CodigoError.CORREO_DUPLICADO,
        f"{P}.fans[2] (HAL0003).correo: mismo correo (sin distinguir mayúsculas); "
        f"ya aparece en {P}.fans[1] (HAL0002)",
    ),
    (
        "qr repetido",
        _append((*PROG, "fans"), {**NEW_FAN, "qr_token": "q7Hk2Pz"}),
        F,
        f"{P}.fans[2] (HAL0003).qr_token: qr_token repetido; ya aparece en {P}.fans[0] (HAL0001)",
    ),
    # promos
    ("promo sin nombre", _del((*PROMO0, "nombre")), F, f"{P}.promos[0].nombre: falta el campo"),
    (
        "vigencia imposible",
        _set((*PROMO0, "vigencia_fin"), "2099-13-01"),
        F,
        f'{H}.vigencia_fin: debe ser una fecha AAAA-MM-DD (recibido "2099-13-01")',
    ),
    (
        "vigencia sin ceros",
        _set((*PROMO0, "vigencia_fin"), "2099-1-01"),
        F,
        f'{H}.vigencia_fin: debe ser una fecha AAAA-MM-DD (recibido "2099-1-01")',
    ),
    ("vigencia falta", _del((*PROMO0, "vigencia_fin")), F, f"{H}.vigencia_fin: falta el campo"),
    ("promo estado", _set((*PROMO0, "estado"), "vigente"), F, f"{H}.estado: debe ser uno de"),
    (
        "puntos_canje negativos",
        _set((*PROMO0, "puntos_canje"), -1),
        F,
        f"{H}.puntos_canje: no puede ser negativo (recibido -1)",
    ),
    (
        "descripcion no texto",
        _set((*PROMO0, "descripcion"), None),
        F,
        f"{H}.descripcion: debe ser texto, no null",
    ),
    (
        "promo repetida",
        _set((*PROG, "promos", 1, "nombre"), "2X1 HOT DOG"),
        F,
        f"{P}.promos[1] (2X1 HOT DOG).nombre: nombre de promoción repetido (sin distinguir "
        f"mayúsculas); ya aparece en {H}",
    ),
    (
        "codigos no lista",
        _set((*PROMO0, "codigos"), "HD-1"),
        F,
        f"{H}.codigos: debe ser una lista, no texto",
    ),
    # codes
    ("código vacío", _set((*COD0, "codigo"), "  "), F, f"{H}.codigos[0].codigo: "),
    ("código largo", _set((*COD0, "codigo"), "X" * 65), F, f"{H}.codigos[0].codigo: más de 64"),
    (
        "código asignado sin fan",
        _del((*COD0, "fan")),
        F,
        f"{H}.codigos[0] (HD-0001).fan: falta el campo (requerido con estado asignado)",
    ),
    (
        "código canjeado sin fan",
        _del((*PROMO0, "codigos", 2, "fan")),
        F,
        f"{H}.codigos[2] (HD-0003).fan: falta el campo (requerido con estado canjeado)",
    ),
    (
        "código disponible con fan",
        _set((*PROMO0, "codigos", 1, "fan"), "HAL0001"),
        F,
        f"{H}.codigos[1] (HD-0002).fan: un código disponible",
    ),
    ("código estado", _set((*COD0, "estado"), "usado"), F, f"{H}.codigos[0] (HD-0001).estado: "),
    (
        "código repetido",
        _append((*PROMO0, "codigos"), {"codigo": "hd-0001 "}),
        F,
        f"{H}.codigos[4] (HD-0001).codigo: código repetido en la promoción; ya aparece en "
        f"{H}.codigos[0] (HD-0001)",
    ),
    (
        "código campo desconocido",
        _set((*COD0, "fan_id"), "HAL0001"),
        F,
        f"{H}.codigos[0].fan_id: campo desconocido",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "codigo", "contains"), [pytest.param(m, c, t, id=i) for i, m, c, t in CASES]
)
def test_malformed_fixture(mutate: Mutate, codigo: CodigoError, contains: str) -> None:
    doc = copy.deepcopy(valid())
    mutate(doc)
    with pytest.raises(LoyaltyError) as caught:
        parse_fixture(json.dumps(doc))
    assert caught.value.codigo == codigo
    assert contains in caught.value.detalle
    _assert_one_line_without_secrets(caught.value.detalle)


RAW_CASES: list[tuple[str, str, str]] = [
    ("no JSON", '{"programas": [', "documento: no es JSON válido"),
    ("vacío", "", "documento: no es JSON válido"),
    ("raíz lista", "[]", "documento: debe ser un objeto, no una lista"),
    (
        "NaN",
        '{"programas": [{"id": "a", "nombre": "A", "tasa_puntos": NaN}]}',
        "documento: no es JSON válido",
    ),
    (
        "campo repetido",
        '{"programas": [{"id": "a", "id": "b", "nombre": "A", "tasa_puntos": 1}]}',
        "programas[0].id: campo repetido en el objeto",
    ),
    (
        "fecha con salto",
        json.dumps(
            {
                "programas": [
                    {
                        "id": "a",
                        "nombre": "A",
                        "tasa_puntos": 1,
                        "promos": [{"nombre": "P", "vigencia_fin": "2099-\n12-31"}],
                    }
                ]
            }
        ),
        "programas[0] (a).promos[0] (P).vigencia_fin: debe ser una fecha AAAA-MM-DD "
        '(recibido "2099-\\n12-31")',
    ),
    (
        "nombre con salto",
        json.dumps({"programas": [{"id": "a", "nombre": "Club\nA", "tasa_puntos": 1}]}),
        "programas[0] (a).nombre: contiene caracteres de control",
    ),
    (
        "int fuera de rango",
        json.dumps(
            {
                "programas": [
                    {
                        "id": "a",
                        "nombre": "A",
                        "tasa_puntos": 1,
                        "promos": [
                            {"nombre": "P", "vigencia_fin": "2099-01-01", "puntos_canje": 2**31}
                        ],
                    }
                ]
            }
        ),
        f"programas[0] (a).promos[0] (P).puntos_canje: {2**31} fuera de rango",
    ),
    (
        "clave completa mal formada",
        json.dumps(
            {
                "programas": [
                    {
                        "id": "a",
                        "nombre": "A",
                        "tasa_puntos": 1,
                        "claves": [{"clave": KEY + "!", "integracion": "x", "permisos": []}],
                    }
                ]
            }
        ),
        "programas[0] (a).claves[0].clave: una clave es",
    ),
]


@pytest.mark.parametrize(
    ("document", "contains"), [pytest.param(d, t, id=i) for i, d, t in RAW_CASES]
)
def test_malformed_document(document: str, contains: str) -> None:
    with pytest.raises(LoyaltyError) as caught:
        parse_fixture(document)
    assert caught.value.codigo in (CodigoError.FIXTURE_INVALIDO, CodigoError.CLAVE_MAL_FORMADA)
    assert contains in caught.value.detalle
    _assert_one_line_without_secrets(caught.value.detalle)


def test_first_problem_in_document_order_wins() -> None:
    doc = valid()
    doc["programas"][0]["fans"][0]["correo"] = "x"
    doc["programas"][0]["promos"][0]["vigencia_fin"] = "mañana"
    with pytest.raises(LoyaltyError, match=r"fans\[0\] \(HAL0001\)\.correo"):
        parse_fixture(json.dumps(doc))


def _assert_one_line_without_secrets(detalle: str) -> None:
    assert "\n" not in detalle
    assert "\r" not in detalle
    for secret in SECRETS:
        assert secret not in detalle
        # Not even the secret part after the prefix.
        assert secret.split("_", 2)[2] not in detalle
