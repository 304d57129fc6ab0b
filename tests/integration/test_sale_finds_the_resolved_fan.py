"""The sale credits the fan `fan/resolve` shows, for every reading of a POS value.

The readings of a value (domain/fan_ref.py) are written twice: as store/fan_lookup.py's
statements, which `fan/resolve` runs, and inside the sale's database function
(`loyalty_tx`, migration 0014: a delegated function cannot call a statement of the
application). This ties the copy to its source by behaviour: each value below — every
form, each reading of the text form and their order, copies of one code in both states,
look-alike letters, a fan given up — names the same fan (or none) both ways."""

from __future__ import annotations

import itertools
import json
import secrets
from datetime import UTC, date, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, select

from loyalty_grpc.domain.fan_ref import parse_fan_ref
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.store.folios import Folios
from loyalty_grpc.store.resolve import fan_and_promo
from loyalty_grpc.store.sale import SaleValues, insert_sale
from loyalty_grpc.store.tables import claves, fans
from loyalty_grpc.store.uow import run_in_uow

PROGRAM = "lecturas"
KELVIN = "\u212a"
_ids = itertools.count()


def _fan(fan_id: str, correo: str, token: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": fan_id,
        "nombre": "Fan",
        "correo": correo,
        "socio_desde": 2020,
        "qr_token": token,
        **extra,
    }


@pytest.fixture(scope="module")
def program(engine: Engine) -> tuple[Engine, int, Folios]:
    document = {
        "programas": [
            {
                "id": PROGRAM,
                "nombre": "Club Lecturas",
                "tasa_puntos": "1",
                "qr_url": "https://lecturas.example/fan",
                "claves": [
                    {
                        "clave": "lp_vivo_" + secrets.token_hex(16),
                        "integracion": "Caja",
                        "permisos": [],
                    }
                ],
                "fans": [
                    _fan("ANA01", "ana@example.com", "tokAna"),
                    # Its QR token is another fan's Fan ID: the Fan ID reading comes first.
                    _fan("BEA01", "bea@example.com", "ANA01"),
                    _fan("KELVIN01", f"{KELVIN}iki@example.com", "tokKelvin"),
                    _fan("KIKI01", "kiki@example.com", "tokKiki"),
                    _fan(
                        "IDO01",
                        "ido@example.com",
                        "tokIdo",
                        estado="baja",
                        baja_motivo="se fue",
                    ),
                    # A fan whose Fan ID is a code's text: the Fan ID reading wins.
                    _fan("HD-0002", "hd@example.com", "tokHd"),
                ],
                "promos": [
                    {
                        "nombre": "Promo",
                        "vigencia_fin": "2099-12-31",
                        "codigos": [
                            {"codigo": "HD-0001", "estado": "asignado", "fan": "KIKI01"},
                            {"codigo": "HD-0002", "estado": "asignado", "fan": "BEA01"},
                            {"codigo": "HD-0003", "estado": "canjeado", "fan": "ANA01"},
                            {"codigo": "HD-0004", "estado": "disponible"},
                            {"codigo": "HD-0005", "estado": "asignado", "fan": "IDO01"},
                        ],
                    },
                    {
                        "nombre": "Otra",
                        "vigencia_fin": "2099-12-31",
                        # The same text in another promotion: the `asignado` copy first.
                        "codigos": [
                            {"codigo": "HD-0003", "estado": "asignado", "fan": "KIKI01"},
                        ],
                    },
                ],
            }
        ]
    }
    run_in_uow(engine, apply_fixture, json.dumps(document))
    with engine.connect() as conn:
        clave = conn.execute(select(claves.c.id).where(claves.c.programa_id == PROGRAM)).scalar()
    assert clave is not None
    return engine, int(clave), Folios(engine)


def _resolved(engine: Engine, value: str) -> int | None:
    row = fan_and_promo(engine, PROGRAM, parse_fan_ref(value), date(2026, 1, 1))
    return None if row is None else int(row[0])


def _credited(engine: Engine, clave: int, folios: Folios, value: str) -> int | None:
    sale = SaleValues(
        folio=folios.take(),
        programa=PROGRAM,
        modo="vivo",
        id_externo=f"lectura-{next(_ids)}",
        centavos=100,
        moneda="MXN",
        terminal=None,
        sitio=None,
        ts=datetime.now(UTC),
        puntos=1,
        clave_id=clave,
    )
    row = insert_sale(engine, sale, parse_fan_ref(value))
    return None if row is None else row.fan_pk


@pytest.mark.parametrize(
    "value",
    [
        "https://lecturas.example/fan/tokAna",  # QR URL
        "ana@example.com",
        "ANA@Example.COM",
        f"{KELVIN}iki@example.com",
        "kiki@example.com",
        "ANA01",  # a Fan ID, also BEA01's QR token
        "ana01",
        "tokBea",  # no such token
        "HD-0001",  # a code delivered to KIKI01
        "hd-0001",
        "HD-0002",  # a Fan ID and a code: the Fan ID
        "HD-0003",  # canjeado for ANA01, asignado for KIKI01: the asignado copy
        "HD-0004",  # never delivered
        "HD-0005",  # delivered to a fan given up
        "tokKiki",  # a raw QR token
        "tokIdo",  # a fan given up
        "nadie",
    ],
)
def test_the_sale_credits_the_fan_resolve_shows(
    program: tuple[Engine, int, Folios], value: str
) -> None:
    engine, clave, folios = program
    assert _credited(engine, clave, folios, value) == _resolved(engine, value)


def test_the_cases_reach_every_reading(program: tuple[Engine, int, Folios]) -> None:
    """Not vacuous: the values above find fans by each reading, and miss some."""
    engine, _clave, _folios = program
    with engine.connect() as conn:
        rows = conn.execute(
            select(fans.c.fan_id, fans.c.pk).where(fans.c.programa_id == PROGRAM)
        ).all()
    pk = {str(fan_id): int(key) for fan_id, key in rows}
    assert _resolved(engine, "ANA01") == pk["ANA01"]
    assert _resolved(engine, "HD-0001") == pk["KIKI01"]
    assert _resolved(engine, "HD-0002") == pk["HD-0002"]
    assert _resolved(engine, "HD-0003") == pk["KIKI01"]
    assert _resolved(engine, "tokKiki") == pk["KIKI01"]
    assert _resolved(engine, "tokIdo") is None
    assert _resolved(engine, "HD-0005") is None
