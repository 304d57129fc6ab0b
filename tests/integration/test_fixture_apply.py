"""apply_fixture against a real PostgreSQL: creates, counts, is idempotent down to every
column, updates exactly what changed, keeps the ledger and the balance together, and a
failing fixture leaves the database as it was.

All tests of this module share one database (the module's `engine`); each uses its own
program ids."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select, text

import loyalty_grpc.runtime.cli
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.keys import key_hash
from loyalty_grpc.services.backoffice.fixtures import ENTIDADES, ApplyCount, apply_fixture
from loyalty_grpc.store.tables import (
    LEDGER_MISMATCH_SQL,
    claves,
    codigos,
    fans,
    movimientos,
    promos,
)
from loyalty_grpc.store.uow import run_in_uow
from tests.support import snapshot


def counts(result: list[ApplyCount]) -> dict[str, tuple[int, int, int]]:
    assert [c.entidad for c in result] == list(ENTIDADES)
    return {c.entidad: (c.creados, c.actualizados, c.sin_cambios) for c in result}


def apply(engine: Engine, doc: dict[str, Any]) -> dict[str, tuple[int, int, int]]:
    return counts(run_in_uow(engine, apply_fixture, json.dumps(doc)))


def ledger_ok(engine: Engine) -> None:
    with engine.connect() as conn:
        assert conn.execute(text(LEDGER_MISMATCH_SQL)).all() == []


def key(name: str, prefix: str = "lp_vivo_") -> str:
    """A key of its own for each name, the same every run, strong enough to be created."""
    return prefix + hashlib.sha256(name.encode()).hexdigest()[:32]


def design_example(programa: str = "halcones") -> dict[str, Any]:
    """DESIGN.md §4's example, filled in."""
    return {
        "programas": [
            {
                "id": programa,
                "nombre": "Club Halcones",
                "tasa_puntos": "0.1",
                "qr_url": "https://halcones.example/fan",
                "claves": [
                    {
                        "clave": key(programa + "Norte"),
                        "integracion": "Caja Norte",
                        "permisos": ["fan:leer", "tx:escribir"],
                    }
                ],
                "fans": [
                    {
                        "id": "HAL0001",
                        "nombre": "Ana",
                        "correo": "ana@example.com",
                        "socio_desde": 2018,
                        "temporadas": 5,
                        "qr_token": "q7Hk2Pz",
                        "puntos": 100,
                        "estado": "activo",
                    },
                    {
                        "id": "HAL0002",
                        "nombre": "Beto Ruiz",
                        "correo": "beto@example.com",
                        "socio_desde": 2020,
                        "temporadas": 2,
                        "qr_token": "b3Rz9Qa",
                        "estado": "baja",
                        "baja_motivo": "solicitud del socio",
                    },
                ],
                "promos": [
                    {
                        "nombre": "2x1 Hot Dog",
                        "descripcion": "Dos hot dogs por uno.",
                        "estado": "activa",
                        "vigencia_fin": "2099-12-31",
                        "puntos_canje": 50,
                        "codigos": [
                            {"codigo": "HD-0001", "estado": "asignado", "fan": "HAL0001"},
                            {"codigo": "HD-0002"},
                        ],
                    }
                ],
            }
        ]
    }


def rich(programa: str) -> dict[str, Any]:
    """A fixture with every kind of entry and every code state."""
    return {
        "programas": [
            {
                "id": programa,
                "nombre": f"Club {programa}",
                "tasa_puntos": 0.25,
                "claves": [
                    {
                        "clave": key(programa + "A"),
                        "integracion": "Caja A",
                        "permisos": ["roster:leer", "fan:leer"],
                    },
                    {
                        "clave": key(programa + "B", "lp_prueba_"),
                        "integracion": "Pruebas",
                        "permisos": [],
                    },
                ],
                "fans": [
                    {
                        "id": f"{programa}-{n}",
                        "nombre": f"Fan {n}",
                        "correo": f"fan{n}@example.com",
                        "socio_desde": 2000 + n,
                        "temporadas": n,
                        "qr_token": f"{programa}qr{n}",
                        "puntos": 10 * n,
                        **({"estado": "baja", "baja_motivo": "mudanza"} if n == 4 else {}),
                    }
                    for n in range(1, 6)
                ],
                "promos": [
                    {
                        "nombre": "Refresco",
                        "vigencia_fin": "2099-06-30",
                        "puntos_canje": 5,
                        "codigos": [
                            {"codigo": "R-1"},
                            {"codigo": "R-2", "estado": "asignado", "fan": f"{programa}-1"},
                            {"codigo": "R-3", "estado": "canjeado", "fan": f"{programa}-2"},
                            {"codigo": "R-4", "estado": "liberado", "fan": f"{programa}-3"},
                            {"codigo": "R-5", "estado": "liberado"},
                        ],
                    },
                    {"nombre": "Gorra", "estado": "pausada", "vigencia_fin": "2030-01-01"},
                ],
            }
        ]
    }


def test_design_example_applies_and_creates_everything(engine: Engine) -> None:
    result = apply(engine, design_example())
    assert result == {
        "programas": (1, 0, 0),
        "claves": (1, 0, 0),
        "fans": (2, 0, 0),
        "promos": (1, 0, 0),
        "codigos": (2, 0, 0),
        "ajustes": (1, 0, 1),
    }
    with engine.connect() as conn:
        clave = conn.execute(
            select(claves).where(claves.c.hash == key_hash(key("halconesNorte")))
        ).one()
        assert (
            clave.programa_id,
            clave.modo,
            clave.integracion,
            clave.permisos,
            clave.sufijo,
            clave.revocada,
        ) == (
            "halcones",
            "vivo",
            "Caja Norte",
            ["fan:leer", "tx:escribir"],
            key("halconesNorte")[-4:],
            None,
        )
        ana, beto = conn.execute(
            select(fans).where(fans.c.programa_id == "halcones").order_by(fans.c.fan_id)
        ).all()
        assert (ana.puntos, ana.estado, ana.baja_en, ana.qr_token) == (
            100,
            "activo",
            None,
            "q7Hk2Pz",
        )
        assert (beto.puntos, beto.estado, beto.baja_motivo) == (0, "baja", "solicitud del socio")
        assert beto.baja_en is not None
        assert conn.execute(
            select(movimientos.c.puntos, movimientos.c.motivo, movimientos.c.nota).where(
                movimientos.c.fan_pk == ana.pk
            )
        ).all() == [(100, "ajuste", "fixture")]
        promo = conn.execute(select(promos).where(promos.c.programa_id == "halcones")).one()
        assert (promo.nombre, promo.estado, promo.puntos_canje, str(promo.vigencia_fin)) == (
            "2x1 Hot Dog",
            "activa",
            50,
            "2099-12-31",
        )
        hd1, hd2 = conn.execute(
            select(codigos).where(codigos.c.promo_id == promo.id).order_by(codigos.c.codigo)
        ).all()
        assert (hd1.codigo, hd1.estado, hd1.fan_pk, hd1.programa_id) == (
            "HD-0001",
            "asignado",
            ana.pk,
            "halcones",
        )
        assert hd1.asignado_en is not None
        assert (hd2.codigo, hd2.estado, hd2.fan_pk, hd2.asignado_en) == (
            "HD-0002",
            "disponible",
            None,
            None,
        )
    ledger_ok(engine)


def test_apply_twice_changes_nothing_at_all(engine: Engine) -> None:
    doc = rich("gemelos")
    first = apply(engine, doc)
    assert first == {
        "programas": (1, 0, 0),
        "claves": (2, 0, 0),
        "fans": (5, 0, 0),
        "promos": (2, 0, 0),
        "codigos": (5, 0, 0),
        "ajustes": (5, 0, 0),
    }
    before = snapshot(engine)
    second = apply(engine, doc)
    assert second == {
        "programas": (0, 0, 1),
        "claves": (0, 0, 2),
        "fans": (0, 0, 5),
        "promos": (0, 0, 2),
        "codigos": (0, 0, 5),
        "ajustes": (0, 0, 5),
    }
    assert snapshot(engine) == before
    ledger_ok(engine)


def test_changed_fixture_updates_exactly_the_changed_rows(engine: Engine) -> None:
    doc = rich("cambios")
    apply(engine, doc)
    before = snapshot(engine)
    changed = copy.deepcopy(doc)
    p = changed["programas"][0]
    p["tasa_puntos"] = "0.250000"  # same number: no change
    p["claves"][0]["permisos"] = ["fan:leer", "roster:leer"]  # same set: no change
    p["claves"][1]["integracion"] = "Pruebas QA"  # key 1 changes
    p["fans"][0]["nombre"] = "Fan Uno"  # roster field
    p["fans"][1]["puntos"] = 5  # 20 → 5: one adjustment of -15
    p["fans"][2]["temporadas"] = 30  # not a roster field
    p["fans"][3] = {
        k: v
        for k, v in p["fans"][3].items()  # baja → activo
        if k not in ("estado", "baja_motivo")
    }
    p["fans"].append(
        {
            "id": "cambios-9",
            "nombre": "Nueva",
            "correo": "nueva@example.com",
            "socio_desde": 2024,
            "qr_token": "cambiosqr9",
        }
    )
    p["promos"][1]["estado"] = "terminada"
    p["promos"][0]["codigos"][0] = {"codigo": "r-1", "estado": "asignado", "fan": "cambios-9"}
    p["promos"][0]["codigos"].append({"codigo": "R-6"})

    result = apply(engine, changed)
    assert result == {
        "programas": (0, 0, 1),
        "claves": (0, 1, 1),
        "fans": (1, 3, 2),
        "promos": (0, 1, 1),
        "codigos": (1, 1, 4),
        "ajustes": (1, 0, 5),
    }
    after = snapshot(engine)

    def by_pk(rows: list[tuple[Any, ...]]) -> dict[Any, tuple[Any, ...]]:
        return {row[0]: row for row in rows}

    def diff(table: str) -> tuple[set[Any], set[Any]]:
        old, new = by_pk(before[table]), by_pk(after[table])
        return (
            {pk for pk in new if pk not in old},
            {pk for pk in old if pk in new and old[pk] != new[pk]},
        )

    with engine.connect() as conn:
        fan_pk = dict(
            conn.execute(
                select(fans.c.fan_id, fans.c.pk).where(fans.c.programa_id == "cambios")
            ).all()
        )
        code_id = dict(
            conn.execute(
                select(codigos.c.codigo, codigos.c.id).where(codigos.c.programa_id == "cambios")
            ).all()
        )
        key_id = conn.execute(
            select(claves.c.id).where(claves.c.integracion == "Pruebas QA")
        ).scalar_one()
        gorra = conn.execute(
            select(promos.c.id).where(promos.c.programa_id == "cambios", promos.c.nombre == "Gorra")
        ).scalar_one()

    assert diff("programas") == (set(), set())
    assert diff("claves") == (set(), {key_id})
    assert diff("fans") == (
        {fan_pk["CAMBIOS-9"]},
        {fan_pk["CAMBIOS-1"], fan_pk["CAMBIOS-2"], fan_pk["CAMBIOS-3"], fan_pk["CAMBIOS-4"]},
    )
    assert diff("promos") == (set(), {gorra})
    assert diff("codigos") == ({code_id["R-6"]}, {code_id["R-1"]})
    new_moves, changed_moves = diff("movimientos")
    assert changed_moves == set()
    assert len(new_moves) == 1
    assert diff("ventas") == (set(), set())

    with engine.connect() as conn:
        rows = {
            r.fan_id: r for r in conn.execute(select(fans).where(fans.c.programa_id == "cambios"))
        }
        old = {row[0]: row for row in before["fans"]}
        xid = fans.c.keys().index("cambio_xid")
        # The roster change columns moved for roster changes only (not for temporadas).
        assert rows["CAMBIOS-1"].cambio_xid != old[fan_pk["CAMBIOS-1"]][xid]
        assert rows["CAMBIOS-3"].cambio_xid == old[fan_pk["CAMBIOS-3"]][xid]
        assert rows["CAMBIOS-3"].temporadas == 30
        assert rows["CAMBIOS-5"].cambio_xid == old[fan_pk["CAMBIOS-5"]][xid]
        assert (
            rows["CAMBIOS-4"].estado,
            rows["CAMBIOS-4"].baja_en,
            rows["CAMBIOS-4"].baja_motivo,
        ) == ("activo", None, None)
        assert rows["CAMBIOS-2"].puntos == 5
        assert conn.execute(
            select(movimientos.c.puntos)
            .where(movimientos.c.fan_pk == fan_pk["CAMBIOS-2"])
            .order_by(movimientos.c.id)
        ).scalars().all() == [20, -15]
        r1 = conn.execute(select(codigos).where(codigos.c.id == code_id["R-1"])).one()
        assert (r1.estado, r1.fan_pk) == ("asignado", fan_pk["CAMBIOS-9"])
        assert r1.asignado_en is not None

    # And the changed fixture is itself idempotent.
    again = snapshot(engine)
    assert all(c[:2] == (0, 0) for c in apply(engine, changed).values())
    assert snapshot(engine) == again
    ledger_ok(engine)


def test_baja_keeps_its_moment_and_codes_keep_theirs(engine: Engine) -> None:
    doc = rich("momentos")
    apply(engine, doc)
    with engine.connect() as conn:
        baja_en = conn.execute(
            select(fans.c.baja_en).where(fans.c.fan_id == "MOMENTOS-4")
        ).scalar_one()
        r2 = conn.execute(
            select(codigos).where(codigos.c.programa_id == "momentos", codigos.c.codigo == "R-2")
        ).one()
    doc["programas"][0]["fans"][3]["baja_motivo"] = "cambio de ciudad"
    doc["programas"][0]["promos"][0]["codigos"][1]["estado"] = "canjeado"
    assert apply(engine, doc)["fans"] == (0, 1, 4)
    with engine.connect() as conn:
        fan = conn.execute(select(fans).where(fans.c.fan_id == "MOMENTOS-4")).one()
        assert (fan.baja_en, fan.baja_motivo) == (baja_en, "cambio de ciudad")
        after = conn.execute(select(codigos).where(codigos.c.id == r2.id)).one()
        assert (after.estado, after.asignado_en) == ("canjeado", r2.asignado_en)
        assert after.canjeado_en is not None


def test_code_may_name_a_fan_already_in_the_database(engine: Engine) -> None:
    apply(engine, design_example("previos"))
    later = {
        "programas": [
            {
                "id": "previos",
                "nombre": "Club Halcones",
                "tasa_puntos": "0.1",
                "qr_url": "https://halcones.example/fan",
                "promos": [
                    {
                        "nombre": "Nueva",
                        "vigencia_fin": "2099-01-01",
                        "codigos": [{"codigo": "N-1", "estado": "asignado", "fan": "hal0002"}],
                    }
                ],
            }
        ]
    }
    assert apply(engine, later)["codigos"] == (1, 0, 0)
    with engine.connect() as conn:
        assert (
            conn.execute(
                select(fans.c.fan_id)
                .join(
                    codigos,
                    (codigos.c.programa_id == fans.c.programa_id) & (codigos.c.fan_pk == fans.c.pk),
                )
                .where(codigos.c.programa_id == "previos", codigos.c.codigo == "N-1")
            ).scalar_one()
            == "HAL0002"
        )


def _fails(engine: Engine, doc: dict[str, Any] | str, codigo: CodigoError, contains: str) -> None:
    before = snapshot(engine)
    with pytest.raises(LoyaltyError) as caught:
        run_in_uow(engine, apply_fixture, doc if isinstance(doc, str) else json.dumps(doc))
    assert caught.value.codigo == codigo
    assert contains in caught.value.detalle
    assert snapshot(engine) == before


def _base_with_extra(programa: str) -> dict[str, Any]:
    """`rich(programa)` applied, plus a new program so that a failing apply has written
    something before it fails."""
    doc = rich(programa)
    doc["programas"].insert(0, {"id": f"{programa}-nuevo", "nombre": "Nuevo", "tasa_puntos": 1})
    return doc


def test_validation_failure_changes_nothing(engine: Engine) -> None:
    apply(engine, rich("valida"))
    doc = rich("valida")
    doc["programas"][0]["promos"][0]["vigencia_fin"] = "2099-13-01"
    _fails(
        engine,
        doc,
        CodigoError.FIXTURE_INVALIDO,
        "programas[0] (valida).promos[0] (Refresco).vigencia_fin: debe ser una fecha "
        'AAAA-MM-DD (recibido "2099-13-01")',
    )
    _fails(engine, "no json", CodigoError.FIXTURE_INVALIDO, "documento")


def test_email_of_another_fan_is_correo_duplicado_and_changes_nothing(engine: Engine) -> None:
    apply(engine, rich("correos"))
    doc = _base_with_extra("correos")
    del doc["programas"][1]["fans"][1]  # CORREOS-2 stays in the database only
    doc["programas"][1]["fans"].append(
        {
            "id": "correos-9",
            "nombre": "Otra",
            "correo": "FAN2@example.com",
            "socio_desde": 2020,
            "qr_token": "correosqr9",
            "puntos": 7,
        }
    )
    doc["programas"][1]["fans"][0]["nombre"] = "Cambiado"
    _fails(
        engine,
        doc,
        CodigoError.CORREO_DUPLICADO,
        "programas[1] (correos).fans[4] (CORREOS-9).correo: ya lo usa otro fan del "
        "programa correos (CORREOS-2)",
    )


def test_qr_token_of_another_fan_is_qr_duplicado_and_changes_nothing(engine: Engine) -> None:
    apply(engine, rich("qrs"))
    doc = _base_with_extra("qrs")
    del doc["programas"][1]["fans"][2]  # QRS-3 stays in the database only
    doc["programas"][1]["fans"][0]["qr_token"] = "qrsqr3"
    _fails(
        engine,
        doc,
        CodigoError.QR_DUPLICADO,
        "programas[1] (qrs).fans[0] (QRS-1).qr_token: ya lo usa otro fan del programa qrs (QRS-3)",
    )


def test_key_of_another_program_is_refused_without_echoing_it(engine: Engine) -> None:
    apply(engine, rich("duenos"))
    doc = _base_with_extra("ajenos")
    stolen = rich("duenos")["programas"][0]["claves"][0]["clave"]
    doc["programas"][1]["claves"][0]["clave"] = stolen
    before = snapshot(engine)
    with pytest.raises(LoyaltyError) as caught:
        run_in_uow(engine, apply_fixture, json.dumps(doc))
    assert caught.value.codigo == CodigoError.FIXTURE_INVALIDO
    assert caught.value.detalle.startswith(
        "programas[1] (ajenos).claves[0] (Caja A).clave: ya está registrada en otro programa"
    )
    assert stolen not in caught.value.detalle
    assert stolen[8:] not in caught.value.detalle
    assert snapshot(engine) == before


@pytest.mark.parametrize(
    "weak",
    [
        "lp_vivo_000000000000000000000000",
        "lp_vivo_OtroPrograma00000000000000000",
        "lp_vivo_NoExisteEstaClave0000000000",  # the tour's example (docs/tour.md)
    ],
)
def test_a_weak_new_key_is_clave_mal_formada_and_changes_nothing(engine: Engine, weak: str) -> None:
    apply(engine, rich("debiles"))
    doc = rich("debiles")
    doc["programas"][0]["claves"].append(
        {"clave": weak, "integracion": "Caja Debil", "permisos": ["fan:leer"]}
    )
    doc["programas"][0]["nombre"] = "Cambiado"
    before = snapshot(engine)
    with pytest.raises(LoyaltyError) as caught:
        run_in_uow(engine, apply_fixture, json.dumps(doc))
    assert caught.value.codigo == CodigoError.CLAVE_MAL_FORMADA
    assert caught.value.detalle.startswith(
        "programas[0] (debiles).claves[2] (Caja Debil).clave: la parte secreta de la clave "
        "(tras 'lp_vivo_') "
    )
    assert weak[8:] not in caught.value.detalle
    assert snapshot(engine) == before


def test_a_weak_key_already_stored_keeps_working(engine: Engine) -> None:
    """Only creation is checked: a key stored before the rule (here written straight into
    the table, as an older version could) can be named again by a fixture."""
    weak = "lp_vivo_" + "W" * 24
    doc = rich("antiguas")
    apply(engine, doc)
    with engine.begin() as conn:
        conn.execute(
            claves.insert().values(
                programa_id="antiguas",
                hash=key_hash(weak),
                modo="vivo",
                integracion="Caja Antigua",
                permisos=["fan:leer"],
                sufijo=weak[-4:],
            )
        )
    doc["programas"][0]["claves"].append(
        {"clave": weak, "integracion": "Caja Antigua", "permisos": ["fan:leer"]}
    )
    assert apply(engine, doc)["claves"] == (0, 0, 3)
    doc["programas"][0]["claves"][2]["integracion"] = "Caja Renombrada"
    assert apply(engine, doc)["claves"] == (0, 1, 2)


def test_code_fan_nowhere_is_refused_and_changes_nothing(engine: Engine) -> None:
    apply(engine, rich("huerfanos"))
    doc = _base_with_extra("huerfanos")
    doc["programas"][1]["promos"][0]["codigos"].append(
        {"codigo": "R-9", "estado": "canjeado", "fan": "NADIE-1"}
    )
    _fails(
        engine,
        doc,
        CodigoError.FIXTURE_INVALIDO,
        "programas[1] (huerfanos).promos[0] (Refresco).codigos[5] (R-9).fan: el fan "
        '"NADIE-1" no está en el fixture ni en el programa huerfanos',
    )


def test_many_fans_and_codes(engine: Engine) -> None:
    n = 1500
    doc = {
        "programas": [
            {
                "id": "masivo",
                "nombre": "Masivo",
                "tasa_puntos": 1,
                "fans": [
                    {
                        "id": f"M{i}",
                        "nombre": f"Fan {i}",
                        "correo": f"m{i}@example.com",
                        "socio_desde": 2020,
                        "qr_token": f"mq{i}",
                        "puntos": i % 3,
                    }
                    for i in range(n)
                ],
                "promos": [
                    {
                        "nombre": "Muchos",
                        "vigencia_fin": "2099-01-01",
                        "codigos": [
                            {"codigo": f"C{i}", "estado": "asignado", "fan": f"M{i}"}
                            for i in range(n)
                        ],
                    }
                ],
            }
        ]
    }
    assert apply(engine, doc)["codigos"] == (n, 0, 0)
    before = snapshot(engine)
    result = apply(engine, doc)
    assert result["fans"] == (0, 0, n)
    assert result["codigos"] == (0, 0, n)
    assert snapshot(engine) == before
    ledger_ok(engine)


def test_demo_fixture_applies(engine: Engine) -> None:
    document = (Path(loyalty_grpc.runtime.cli.__file__).parent / "demo_fixture.json").read_text()
    assert counts(run_in_uow(engine, apply_fixture, document)) == {
        "programas": (1, 0, 0),
        "claves": (4, 0, 0),
        "fans": (5, 0, 0),
        "promos": (2, 0, 0),
        "codigos": (8, 0, 0),
        "ajustes": (4, 0, 1),
    }
    before = snapshot(engine)
    assert all(
        c[:2] == (0, 0) for c in counts(run_in_uow(engine, apply_fixture, document)).values()
    )
    assert snapshot(engine) == before
    with engine.connect() as conn:
        states = conn.execute(
            text(
                "SELECT p.estado, c.estado, count(*) FROM codigos c JOIN promos p "
                "ON p.programa_id = c.programa_id AND p.id = c.promo_id "
                "WHERE c.programa_id = 'demo' GROUP BY 1, 2"
            )
        ).all()
    assert {c for p, c, _ in states if p == "activa"} == {
        "disponible",
        "asignado",
        "canjeado",
        "liberado",
    }
    assert {p for p, _, _ in states} == {"activa", "terminada"}
    ledger_ok(engine)
