"""Every column a redemption writes, for both forms of `redeem` (issue 26 §2): the code's
state, the POS's time, the terminal, the key, the server's time, its ledger entry, the fan's
balance and the wallet outbox row. Both forms go through store/redeem.redeem; this test is
what notices a column dropped from it."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import Engine, select

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.keys import PREFIJOS, Modo
from loyalty_grpc.domain.permissions import Permiso
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.services.pos.redeem import Redemption, redeem_code, redeem_codes
from loyalty_grpc.store.tables import claves, codigos, fans, movimientos, wallet_outbox
from loyalty_grpc.store.uow import run_in_uow

P = "cols"
PUNTOS = 11
CLAVES = {modo: PREFIJOS[modo] + secrets.token_hex(16) for modo in Modo}


@pytest.fixture(scope="module")
def callers(engine: Engine) -> dict[Modo, Caller]:
    document = {
        "programas": [
            {
                "id": P,
                "nombre": "Club Cols",
                "tasa_puntos": "1",
                "claves": [
                    {"clave": clave, "integracion": f"Caja {modo}", "permisos": ["redeem:escribir"]}
                    for modo, clave in CLAVES.items()
                ],
                "fans": [
                    {
                        "id": "COL01",
                        "nombre": "Ana",
                        "correo": "ana@example.com",
                        "socio_desde": 2020,
                        "qr_token": "qcol01",
                    }
                ],
                "promos": [
                    {
                        "nombre": "Promo",
                        "vigencia_fin": "2099-12-31",
                        "puntos_canje": PUNTOS,
                        "codigos": [
                            {"codigo": f"K-{i}", "estado": "asignado", "fan": "COL01"}
                            for i in range(1, 9)
                        ],
                    }
                ],
            }
        ]
    }
    run_in_uow(engine, apply_fixture, json.dumps(document))
    with engine.connect() as conn:
        ids = dict(
            conn.execute(select(claves.c.modo, claves.c.id).where(claves.c.programa_id == P)).all()
        )
    return {
        modo: Caller(
            programa_id=P,
            programa_nombre="Club Cols",
            clave_id=int(ids[modo.value]),
            tasa_puntos=Decimal(1),
            moneda="MXN",
            integracion=f"Caja {modo}",
            modo=modo,
            permisos=frozenset({Permiso.REDEEM_ESCRIBIR}),
        )
        for modo in CLAVES
    }


def _single(engine: Engine, caller: Caller, codigo: str, redemption: Redemption) -> int:
    return redeem_code(engine, caller, codigo, redemption).puntos_otorgados


def _batch(engine: Engine, caller: Caller, codigo: str, redemption: Redemption) -> int:
    result = redeem_codes(engine, caller, [codigo], redemption).resultados[0].result
    assert result is not None
    return result.puntos_otorgados


FORMS: dict[str, Callable[[Engine, Caller, str, Redemption], int]] = {
    "single": _single,
    "batch": _batch,
}


def _fan(engine: Engine) -> tuple[int, int]:
    with engine.connect() as conn:
        pk, puntos = conn.execute(
            select(fans.c.pk, fans.c.puntos).where(fans.c.programa_id == P)
        ).one()
    return int(pk), int(puntos)


@pytest.mark.parametrize(
    ("form", "modo", "codigo"),
    [
        ("single", Modo.VIVO, "K-1"),
        ("batch", Modo.VIVO, "K-2"),
        ("single", Modo.PRUEBA, "K-3"),
        ("batch", Modo.PRUEBA, "K-4"),
    ],
)
def test_a_redemption_writes_every_column(
    engine: Engine, callers: dict[Modo, Caller], form: str, modo: Modo, codigo: str
) -> None:
    caller = callers[modo]
    ts = datetime(2026, 5, 4, 13, 14, 15, 123000, tzinfo=UTC)
    now = ts + timedelta(seconds=42)
    terminal = f"Caja {form} 7"
    fan_pk, before = _fan(engine)
    with engine.connect() as conn:
        last_entry = conn.execute(
            select(movimientos.c.id).order_by(movimientos.c.id.desc())
        ).first()
        last_outbox = conn.execute(
            select(wallet_outbox.c.id).order_by(wallet_outbox.c.id.desc())
        ).first()

    otorgados = FORMS[form](engine, caller, codigo, Redemption(terminal=terminal, ts=ts, now=now))

    expected = PUNTOS if modo is Modo.VIVO else 0
    assert otorgados == expected
    with engine.connect() as conn:
        code = conn.execute(
            select(codigos).where(codigos.c.programa_id == P, codigos.c.codigo == codigo)
        ).one()
        entries = conn.execute(
            select(movimientos).where(movimientos.c.id > (last_entry[0] if last_entry else 0))
        ).all()
        outbox = conn.execute(
            select(wallet_outbox).where(wallet_outbox.c.id > (last_outbox[0] if last_outbox else 0))
        ).all()
    assert code.estado == "canjeado"
    assert code.canjeado_en == ts
    assert code.canje_terminal == terminal
    assert code.canje_clave_id == caller.clave_id
    assert code.canje_registrado == now
    assert code.fan_pk == fan_pk  # a redeemed code keeps its fan
    assert _fan(engine)[1] == before + expected
    if modo is Modo.VIVO:
        [entry] = entries
        assert (entry.fan_pk, entry.puntos, entry.motivo) == (fan_pk, PUNTOS, "canje")
        assert (entry.codigo_id, entry.venta_id, entry.nota) == (code.id, None, "")
        [row] = outbox
        assert (row.fan_pk, row.saldo) == (fan_pk, before + PUNTOS)
    else:  # a test key redeems, and credits nothing: no entry, no balance change
        assert entries == []
        assert outbox == []


@pytest.mark.parametrize(("form", "codigo"), [("single", "K-5"), ("batch", "K-6")])
def test_a_duplicate_writes_nothing(
    engine: Engine, callers: dict[Modo, Caller], form: str, codigo: str
) -> None:
    caller = callers[Modo.VIVO]
    first = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
    FORMS[form](engine, caller, codigo, Redemption(terminal="Caja 1", ts=first, now=first))
    with engine.connect() as conn:
        code_before = conn.execute(
            select(codigos).where(codigos.c.programa_id == P, codigos.c.codigo == codigo)
        ).one()
    fan_before = _fan(engine)
    later = first + timedelta(hours=1)
    assert (
        FORMS[form](engine, caller, codigo, Redemption(terminal="Caja 2", ts=later, now=later)) == 0
    )
    with engine.connect() as conn:
        code_after = conn.execute(
            select(codigos).where(codigos.c.programa_id == P, codigos.c.codigo == codigo)
        ).one()
    assert code_after == code_before
    assert _fan(engine) == fan_before
