"""Look-alike letters on a real PostgreSQL (issue 22 §5): the store compares e-mails with the
same ASCII-only fold as the domain, the resolve's e-mail lookup stays one index lookup, and
fixtures refuse Fan IDs and codes that are not ASCII, changing nothing."""

from __future__ import annotations

import json
from datetime import date
from typing import Any

import pytest
from sqlalchemy import Engine, text

from loyalty_grpc.domain.errors import CodigoError
from loyalty_grpc.domain.fan_ref import Forma, parse_fan_ref
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.store.fan_lookup import LOOKUP, lookup_params
from loyalty_grpc.store.resolve import fan_and_promo
from loyalty_grpc.store.uow import run_in_uow
from tests.support import fails

PROGRAM = "parecidos"
KELVIN = "\u212a"  # K: PostgreSQL's lower() under a UTF-8 collation gives `k`


def fan(fan_id: str, correo: str, token: str) -> dict[str, Any]:
    return {
        "id": fan_id,
        "nombre": "Fan",
        "correo": correo,
        "socio_desde": 2020,
        "qr_token": token,
    }


def document(
    fans: list[dict[str, Any]], codigos: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "programas": [
            {
                "id": PROGRAM,
                "nombre": "Club Parecidos",
                "tasa_puntos": "1",
                "fans": fans,
                "promos": [
                    {"nombre": "Promo", "vigencia_fin": "2099-12-31", "codigos": codigos or []}
                ],
            }
        ]
    }


def apply(engine: Engine, doc: dict[str, Any]) -> None:
    run_in_uow(engine, apply_fixture, json.dumps(doc))


@pytest.fixture(scope="module")
def program(engine: Engine) -> Engine:
    apply(
        engine,
        document(
            [
                fan("KIKI01", "kiki@example.com", "tokKiki"),
                # The same e-mail with the Kelvin sign: another mailbox, another fan.
                fan("KELVIN01", f"{KELVIN}iki@example.com", "tokKelvin"),
                fan("JOSE01", "JOSÉ@example.com", "tokJose"),
            ],
            [{"codigo": "HD-DISP-0001", "estado": "asignado", "fan": "KIKI01"}],
        ),
    )
    return engine


def resolved(engine: Engine, value: str) -> str | None:
    row = fan_and_promo(engine, PROGRAM, parse_fan_ref(value), date(2026, 1, 1))
    return None if row is None else str(row[1])


def test_the_databases_lower_folds_the_kelvin_sign_and_collate_c_does_not(engine: Engine):
    """Why the store says COLLATE "C": the fact the old index and lookup tripped on."""
    with engine.connect() as conn:
        folded, kept = conn.execute(
            text('SELECT lower(:v), lower(:v COLLATE "C")'), {"v": f"{KELVIN}IKI"}
        ).one()
    assert folded == "kiki"
    assert kept == f"{KELVIN}iki"


@pytest.mark.parametrize(
    ("value", "fan_id"),
    [
        ("kiki@example.com", "KIKI01"),
        ("KIKI@EXAMPLE.COM", "KIKI01"),
        (f"{KELVIN}iki@example.com", "KELVIN01"),
        (f"{KELVIN}IKI@Example.com", "KELVIN01"),
        ("josÉ@example.com", "JOSE01"),
        ("jose@example.com", None),  # É is not E
        ("josé@example.com", None),  # nor é: only ASCII letters change case
        ("k\u0131k\u0131@example.com", None),  # ı is not i
        ("ki\u200bki@example.com", None),
    ],
)
def test_emails_compare_folding_only_ascii_letters(program: Engine, value: str, fan_id: str):
    assert resolved(program, value) == fan_id


@pytest.mark.parametrize("value", ["otro\u017fi01", "kik\u0131\u200b01", "KIKI\uff10\uff11"])
def test_a_text_value_that_is_not_ascii_is_not_found_without_a_query(program: Engine, value):
    assert not parse_fan_ref(value).matchable


def test_the_email_lookup_is_an_index_lookup(program: Engine):
    """The resolve's e-mail statement can use the unique index (its expression is the
    index's): with sequential scans off, the plan reads uq_fans_programa_correo."""
    ref = parse_fan_ref("Kiki@Example.com")
    assert ref.forma is Forma.CORREO
    with program.connect() as conn:
        conn.exec_driver_sql("SET enable_seqscan = off")
        plan = conn.exec_driver_sql(
            "EXPLAIN " + LOOKUP[Forma.CORREO], lookup_params(PROGRAM, ref)
        ).all()
    text_plan = "\n".join(row[0] for row in plan)
    assert "uq_fans_programa_correo" in text_plan, text_plan


def test_the_unique_index_folds_only_ascii(program: Engine):
    with program.connect() as conn:
        (definition,) = conn.execute(
            text("SELECT indexdef FROM pg_indexes WHERE indexname = 'uq_fans_programa_correo'")
        ).one()
    assert 'COLLATE "C"' in definition


def test_an_email_equal_but_for_ascii_case_is_a_duplicate(program: Engine):
    with fails(program, CodigoError.CORREO_DUPLICADO):
        apply(program, document([fan("KIKI02", "KIKI@example.com", "tokKiki2")]))


@pytest.mark.parametrize(
    ("doc", "codigo", "hint"),
    [
        (
            document([fan("otro\u017fi01", "otro@example.com", "tokOtro")]),
            CodigoError.FIXTURE_INVALIDO,
            "fans[0].id: un Fan ID solo lleva caracteres ASCII",
        ),
        (
            document([fan("\u0410\u0415\u041e01", "cyr@example.com", "tokCyr")]),
            CodigoError.FIXTURE_INVALIDO,
            "fans[0].id: un Fan ID solo lleva caracteres ASCII",
        ),
        (
            document([], [{"codigo": "hd-d\u0131sp-0001"}]),
            CodigoError.FIXTURE_INVALIDO,
            "codigos[0].codigo: contiene caracteres que no son ASCII",
        ),
        (
            document([], [{"codigo": "HD-\ufeff0002"}]),
            CodigoError.FIXTURE_INVALIDO,
            "no son ASCII",
        ),
        (
            document([], [{"codigo": "HD-0003", "estado": "asignado", "fan": "kik\u013101"}]),
            CodigoError.FIXTURE_INVALIDO,
            "codigos[0] (HD-0003).fan: un Fan ID solo lleva caracteres ASCII",
        ),
        (
            document([fan("QR01", "qr@example.com", "tok\uff10")]),
            CodigoError.FIXTURE_INVALIDO,
            "qr_token: solo letras",
        ),
    ],
)
def test_fixtures_refuse_identifiers_that_are_not_ascii(
    program: Engine, doc: dict[str, Any], codigo: CodigoError, hint: str
):
    with fails(program, codigo, hint):
        apply(program, doc)
