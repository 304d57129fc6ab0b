"""The redeem use cases on a real PostgreSQL, under concurrency: 20 redemptions of one
code credit once; a batch racing a single redemption credits once; batches over the same
codes in different orders (and sales on the same fans) never deadlock and credit each code
once; a batch that fails half-way leaves nothing; the ledger always sums to the balances."""

from __future__ import annotations

import itertools
import json
import random
import secrets
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from functools import partial
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, text

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.fan_ref import parse_fan_ref
from loyalty_grpc.domain.keys import Modo
from loyalty_grpc.domain.permissions import Permiso
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.services.pos.redeem import Redemption, redeem_code, redeem_codes
from loyalty_grpc.services.pos.sales import NewSale, register_sale
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.redeem import RedeemRow
from loyalty_grpc.store.redeem import redeem as store_redeem
from loyalty_grpc.store.tables import LEDGER_MISMATCH_SQL, claves, codigos, fans, movimientos
from loyalty_grpc.store.uow import run_in_uow
from tests.support import run_together

P = "conc"
FANS = [f"CON{i:02}" for i in range(1, 9)]
PUNTOS = 7
CODES = 800
CLAVE = "lp_vivo_" + secrets.token_hex(16)
_ids = itertools.count()


def redemption() -> Redemption:
    now = datetime.now(UTC)
    return Redemption(terminal="Caja 1", ts=now, now=now)


@pytest.fixture(scope="module")
def engine(db_url: str) -> Iterator[Engine]:
    """A pool as large as the most threads a test starts, so they really run at once."""
    eng = make_engine(db_url, pool_size=20)
    yield eng
    eng.dispose()


@pytest.fixture(scope="module")
def caller(engine: Engine) -> Caller:
    """A program with 8 fans and CODES `asignado` codes, C-0001…, spread over the fans so
    that code order and fan order differ. A new database's codes are all unused: `take`
    starts again (this module's tests also run on the cluster, tests/citus, in the same
    session)."""
    _next_code["code"] = itertools.count(1)
    fan_of = [FANS[(i * 5) % len(FANS)] for i in range(CODES)]
    document = {
        "programas": [
            {
                "id": P,
                "nombre": "Club Conc",
                "tasa_puntos": "1",
                "claves": [
                    {"clave": CLAVE, "integracion": "Caja", "permisos": ["redeem:escribir"]}
                ],
                "fans": [
                    {
                        "id": f,
                        "nombre": f,
                        "correo": f"{f.lower()}@example.com",
                        "socio_desde": 2020,
                        "qr_token": f"qr{f}",
                    }
                    for f in FANS
                ],
                "promos": [
                    {
                        "nombre": "Promo",
                        "vigencia_fin": "2099-12-31",
                        "puntos_canje": PUNTOS,
                        "codigos": [
                            {"codigo": f"C-{i + 1:04}", "estado": "asignado", "fan": f}
                            for i, f in enumerate(fan_of)
                        ],
                    }
                ],
            }
        ]
    }
    run_in_uow(engine, apply_fixture, json.dumps(document))
    with engine.connect() as conn:
        clave_id = conn.execute(select(claves.c.id).where(claves.c.programa_id == P)).scalar_one()
    return Caller(
        programa_id=P,
        programa_nombre="Club Conc",
        clave_id=int(clave_id),
        tasa_puntos=Decimal(1),
        moneda="MXN",
        integracion="Caja",
        modo=Modo.VIVO,
        permisos=frozenset({Permiso.REDEEM_ESCRIBIR}),
    )


_next_code = {"code": itertools.count(1)}


def take(n: int) -> list[str]:
    """n codes no other test uses."""
    numbers = [next(_next_code["code"]) for _ in range(n)]
    assert numbers[-1] <= CODES
    return [f"C-{i:04}" for i in numbers]


def credits_per_code(engine: Engine, texts: list[str]) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(codigos.c.codigo, func.count(movimientos.c.id))
            .outerjoin(
                movimientos,
                (movimientos.c.programa_id == codigos.c.programa_id)
                & (movimientos.c.codigo_id == codigos.c.id),
            )
            .where(codigos.c.programa_id == P, codigos.c.codigo.in_(texts))
            .group_by(codigos.c.codigo)
        ).all()
    return {codigo: int(n) for codigo, n in rows}


def total_points(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.sum(fans.c.puntos)).where(fans.c.programa_id == P)
            ).scalar_one()
        )


def assert_ledger_consistent(engine: Engine) -> None:
    with engine.connect() as conn:
        assert conn.execute(text(LEDGER_MISMATCH_SQL)).all() == []


def test_twenty_concurrent_redemptions_of_one_code_credit_once(engine, caller):
    [codigo] = take(1)
    before = total_points(engine)
    results = run_together(
        [lambda: redeem_code(engine, caller, codigo.lower(), redemption()) for _ in range(20)]
    )
    assert sorted(r.duplicado for r in results) == [False] + [True] * 19
    assert sum(r.puntos_otorgados for r in results) == PUNTOS
    assert total_points(engine) == before + PUNTOS
    assert credits_per_code(engine, [codigo]) == {codigo: 1}
    assert_ledger_consistent(engine)


def test_a_batch_racing_single_redemptions_credits_each_code_once(engine, caller):
    texts = take(30)
    before = total_points(engine)
    calls: list[Callable[[], Any]] = [lambda: redeem_codes(engine, caller, texts, redemption())]
    calls += [partial(redeem_code, engine, caller, c, redemption()) for c in reversed(texts)]
    batch, *singles = run_together(calls)
    redeemed_by_batch = {
        e.codigo for e in batch.resultados if e.result is not None and not e.result.duplicado
    }
    redeemed_by_single = {s.codigo for s in singles if not s.duplicado}
    assert redeemed_by_batch | redeemed_by_single == set(texts)
    assert redeemed_by_batch & redeemed_by_single == set()
    assert batch.resumen.canjeados + batch.resumen.duplicados == 30
    assert total_points(engine) == before + 30 * PUNTOS
    assert credits_per_code(engine, texts) == dict.fromkeys(texts, 1)
    assert_ledger_consistent(engine)


def test_overlapping_batches_in_different_orders_never_deadlock(engine, folios, caller):
    """Eight batches over the same 40 codes (each in its own order, some with repeats)
    plus live sales on the same fans, all at once, five rounds: no deadlock, no error,
    every code credited exactly once."""
    rng = random.Random(7)
    for _ in range(5):
        texts = take(40)
        before = total_points(engine)
        orders = [rng.sample(texts, len(texts)) for _ in range(8)]
        orders[0] = orders[0] + orders[0][:5]  # repeats within a batch
        calls: list[Callable[[], Any]] = [
            partial(redeem_codes, engine, caller, order, redemption()) for order in orders
        ]
        calls += [
            partial(
                register_sale,
                engine,
                folios,
                caller,
                NewSale(
                    id_externo=f"venta-{next(_ids)}",
                    fan=parse_fan_ref(f),
                    centavos=100,
                    moneda="MXN",
                    ts=datetime.now(UTC),
                ),
            )
            for f in FANS
        ]
        results = run_together(calls)
        batches = results[:8]
        assert sum(b.resumen.canjeados for b in batches) == 40
        assert sum(b.resumen.duplicados for b in batches) == 8 * 40 + 5 - 40
        assert all(b.resumen.rechazados == 0 for b in batches)
        assert total_points(engine) == before + 40 * PUNTOS + len(FANS) * 1
        assert credits_per_code(engine, texts) == dict.fromkeys(texts, 1)
    assert_ledger_consistent(engine)


def test_batches_over_different_codes_of_the_same_fans_never_deadlock(engine, caller):
    """Eight batches of their own 10 codes each, whose codes belong to the same fans in
    crossing orders: the fans' rows are locked in one order (ascending pk), so no batch
    waits for another in a cycle."""
    rng = random.Random(11)
    for _ in range(5):
        texts = take(80)
        before = total_points(engine)
        groups = [rng.sample(texts[10 * i : 10 * i + 10], 10) for i in range(8)]
        results = run_together(
            [partial(redeem_codes, engine, caller, g, redemption()) for g in groups]
        )
        assert [b.resumen.canjeados for b in results] == [10] * 8
        assert total_points(engine) == before + 80 * PUNTOS
        assert credits_per_code(engine, texts) == dict.fromkeys(texts, 1)
    assert_ledger_consistent(engine)


def test_a_batch_that_fails_half_way_leaves_nothing(engine, caller, monkeypatch):
    texts = take(6)
    before = total_points(engine)
    real = store_redeem

    def failing(*args: Any, **kwargs: Any) -> list[RedeemRow]:
        real(*args, **kwargs)  # the redemptions and their credits are written, then:
        raise RuntimeError("la base se cayó")

    monkeypatch.setattr("loyalty_grpc.services.pos.redeem.redeem", failing)
    with pytest.raises(RuntimeError):
        redeem_codes(engine, caller, texts, redemption())
    monkeypatch.undo()
    with engine.connect() as conn:
        states = (
            conn.execute(
                select(codigos.c.estado).where(
                    codigos.c.programa_id == P, codigos.c.codigo.in_(texts)
                )
            )
            .scalars()
            .all()
        )
    assert states == ["asignado"] * 6
    assert total_points(engine) == before
    assert credits_per_code(engine, texts) == dict.fromkeys(texts, 0)
    # And the same batch then goes through whole.
    assert redeem_codes(engine, caller, texts, redemption()).resumen.canjeados == 6
    assert total_points(engine) == before + 6 * PUNTOS
    assert_ledger_consistent(engine)
