"""`puntos_acreditados` (issue 23 §2) on a real PostgreSQL: what a sale or a redemption
credited when it was applied, on its first answer and on every retry's alike, also when the
retries run at once with the first call; `puntos_otorgados` keeps its meaning (this call).

The figure comes from the record, never from today's rules: a sale's from `ventas.puntos`
(not the program's rate now), a redemption's from its ledger entry (not the promotion's
`puntos_canje` now). A test key's sale or redemption credited 0, and says so. A voided sale
still says what it credited: the retry answers what its first answer said; the void shows
in `saldo`."""

from __future__ import annotations

import itertools
import json
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
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
from loyalty_grpc.services.backoffice.points import void_sale
from loyalty_grpc.services.backoffice.promos import update_promo
from loyalty_grpc.services.pos.redeem import (
    RedeemResult,
    Redemption,
    redeem_code,
    redeem_codes,
)
from loyalty_grpc.services.pos.sales import NewSale, SaleResult, register_sale
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.ledger import Motivo, move_points
from loyalty_grpc.store.tables import (
    LEDGER_MISMATCH_SQL,
    claves,
    codigos,
    fans,
    movimientos,
    promos,
)
from loyalty_grpc.store.uow import UnitOfWork, run_in_uow
from tests.support import run_together, wait_for_lock_waiters

P = "acred"
FANS = [f"ACR{i:02}" for i in range(1, 7)]
PUNTOS = 9  # the promotion's puntos_canje at first
CODES = 300
TASA = Decimal("0.1")
_ids = itertools.count()
_codes = itertools.count(1)


@pytest.fixture(scope="module")
def engine(db_url: str) -> Iterator[Engine]:
    """A pool as large as the most threads a test starts, so they really run at once."""
    eng = make_engine(db_url, pool_size=50)
    yield eng
    eng.dispose()


def _claves(modo: str) -> dict[str, object]:
    return {
        "clave": f"lp_{modo}_" + secrets.token_hex(16),
        "integracion": f"Caja {modo}",
        "permisos": ["tx:escribir", "redeem:escribir", "fan:leer"],
    }


@pytest.fixture(scope="module")
def callers(engine: Engine) -> dict[Modo, Caller]:
    """A program with a live and a test key, 6 fans and CODES `asignado` codes A-0001…
    (plus A-FIX `canjeado` by the fixture) in one promotion worth PUNTOS."""
    document = {
        "programas": [
            {
                "id": P,
                "nombre": "Club Acred",
                "tasa_puntos": str(TASA),
                "claves": [_claves("vivo"), _claves("prueba")],
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
                            {"codigo": f"A-{i:04}", "estado": "asignado", "fan": FANS[i % 6]}
                            for i in range(1, CODES + 1)
                        ]
                        + [{"codigo": "A-FIX", "estado": "canjeado", "fan": FANS[0]}],
                    }
                ],
            }
        ]
    }
    run_in_uow(engine, apply_fixture, json.dumps(document))
    with engine.connect() as conn:
        rows = conn.execute(
            select(claves.c.id, claves.c.modo).where(claves.c.programa_id == P)
        ).all()
    return {
        Modo(modo): Caller(
            programa_id=P,
            programa_nombre="Club Acred",
            clave_id=int(clave_id),
            tasa_puntos=TASA,
            moneda="MXN",
            integracion="Caja",
            modo=Modo(modo),
            permisos=frozenset({Permiso.TX_ESCRIBIR, Permiso.REDEEM_ESCRIBIR, Permiso.FAN_LEER}),
        )
        for clave_id, modo in rows
    }


@pytest.fixture(scope="module")
def live(callers: dict[Modo, Caller]) -> Caller:
    return callers[Modo.VIVO]


@pytest.fixture(scope="module")
def test_key(callers: dict[Modo, Caller]) -> Caller:
    return callers[Modo.PRUEBA]


def take(n: int) -> list[str]:
    """n codes no other test uses."""
    numbers = [next(_codes) for _ in range(n)]
    assert numbers[-1] <= CODES
    return [f"A-{i:04}" for i in numbers]


def sale(centavos: int = 12_345, fan: str = FANS[1], id_externo: str | None = None) -> NewSale:
    return NewSale(
        id_externo=id_externo or f"venta-{next(_ids)}",
        fan=parse_fan_ref(fan),
        centavos=centavos,
        moneda="MXN",
        ts=datetime.now(UTC),
    )


def redemption() -> Redemption:
    now = datetime.now(UTC)
    return Redemption(terminal="Caja 1", ts=now, now=now)


def ledger_credit_of_code(engine: Engine, codigo: str) -> int:
    """What the ledger says the code's redemption credited (the audit's figure)."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.coalesce(func.sum(movimientos.c.puntos), 0))
                .select_from(
                    movimientos.join(
                        codigos,
                        (codigos.c.programa_id == movimientos.c.programa_id)
                        & (codigos.c.id == movimientos.c.codigo_id),
                    )
                )
                .where(codigos.c.programa_id == P, codigos.c.codigo == codigo)
            ).scalar_one()
        )


def assert_ledger_consistent(engine: Engine) -> None:
    with engine.connect() as conn:
        assert conn.execute(text(LEDGER_MISMATCH_SQL)).all() == []


def promo_id(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(promos.c.id).where(promos.c.programa_id == P)).scalar_one())


def balance(engine: Engine, fan_id: str) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(fans.c.puntos).where(fans.c.programa_id == P, fans.c.fan_id == fan_id)
            ).scalar_one()
        )


# ---------------------------------------------------------------- tx


def test_a_sale_and_its_retry_carry_what_the_sale_credited(engine, folios, live):
    new = sale(centavos=12_345)  # $123.45 at 0.1: 12 points
    first = register_sale(engine, folios, live, new)
    assert (first.duplicado, first.puntos_otorgados, first.puntos_acreditados) == (False, 12, 12)
    retry = register_sale(engine, folios, live, new)
    assert (retry.duplicado, retry.folio) == (True, first.folio)
    assert (retry.puntos_otorgados, retry.puntos_acreditados) == (0, 12)
    assert retry.saldo == first.saldo


def test_the_retry_says_what_the_sale_credited_then_not_what_the_rate_gives_now(
    engine, folios, live
):
    new = sale(centavos=10_000)  # $100 at 0.1: 10 points
    assert register_sale(engine, folios, live, new).puntos_acreditados == 10
    richer = replace(live, tasa_puntos=Decimal(5))  # the program's rate changed since
    assert register_sale(engine, folios, richer, new).puntos_acreditados == 10


def test_a_test_keys_sale_credited_nothing_and_says_so(engine, folios, test_key):
    new = sale()
    first = register_sale(engine, folios, test_key, new)
    retry = register_sale(engine, folios, test_key, new)
    assert (first.puntos_otorgados, first.puntos_acreditados) == (0, 0)
    assert (retry.duplicado, retry.puntos_otorgados, retry.puntos_acreditados) == (True, 0, 0)


def test_a_voided_sale_still_says_what_it_credited(engine, folios, live):
    """The back office voided the sale after its first answer was lost: the retry answers
    what that first answer said (12 credited), and `saldo` shows the void."""
    new = sale(centavos=12_345, fan=FANS[2])
    first = register_sale(engine, folios, live, new)
    voided = run_in_uow(engine, void_sale, P, first.folio, "venta cancelada")
    assert voided.revertidos == 12
    retry = register_sale(engine, folios, live, new)
    assert (retry.duplicado, retry.folio) == (True, first.folio)
    assert (retry.puntos_otorgados, retry.puntos_acreditados) == (0, 12)
    assert retry.saldo == first.saldo - 12 == balance(engine, FANS[2])
    assert_ledger_consistent(engine)


def test_fifty_identical_sales_at_once_credit_once_and_all_say_what(engine, folios, live):
    new = sale(centavos=99_999, fan=FANS[3])  # 99 points
    before = balance(engine, FANS[3])
    results: list[SaleResult] = run_together(
        [partial(register_sale, engine, folios, live, new) for _ in range(50)]
    )
    assert sorted(r.duplicado for r in results) == [False] + [True] * 49
    assert sum(r.puntos_otorgados for r in results) == 99
    assert {r.puntos_acreditados for r in results} == {99}
    assert {r.folio for r in results} == {results[0].folio}
    assert balance(engine, FANS[3]) == before + 99
    assert_ledger_consistent(engine)


# ---------------------------------------------------------------- redeem


def test_a_redemption_and_its_retry_carry_what_it_credited(engine, live):
    [codigo] = take(1)
    first = redeem_code(engine, live, codigo, redemption())
    assert (first.duplicado, first.puntos_otorgados, first.puntos_acreditados) == (
        False,
        PUNTOS,
        PUNTOS,
    )
    retry = redeem_code(engine, live, codigo, redemption())
    assert (retry.duplicado, retry.puntos_otorgados, retry.puntos_acreditados) == (
        True,
        0,
        PUNTOS,
    )
    assert ledger_credit_of_code(engine, codigo) == PUNTOS


def test_the_retry_says_what_the_redemption_credited_not_what_the_promotion_gives_now(engine, live):
    single, batched = take(2)
    redeem_code(engine, live, single, redemption())
    redeem_codes(engine, live, [batched], redemption())
    run_in_uow(engine, update_promo, P, promo_id(engine), puntos_canje=PUNTOS + 40)
    try:
        assert redeem_code(engine, live, single, redemption()).puntos_acreditados == PUNTOS
        [entry] = redeem_codes(engine, live, [single, batched], redemption()).resultados[1:]
        assert entry.result is not None
        assert (entry.result.duplicado, entry.result.puntos_acreditados) == (True, PUNTOS)
    finally:
        run_in_uow(engine, update_promo, P, promo_id(engine), puntos_canje=PUNTOS)


def test_a_code_a_test_key_redeemed_credited_nothing_for_anyone(engine, live, test_key):
    first, second = take(2)
    assert redeem_code(engine, test_key, first, redemption()).puntos_acreditados == 0
    [batch_first] = redeem_codes(engine, test_key, [second], redemption()).resultados
    assert batch_first.result is not None
    assert batch_first.result.puntos_acreditados == 0
    for caller in (live, test_key):
        retry = redeem_code(engine, caller, first, redemption())
        assert (retry.duplicado, retry.puntos_otorgados, retry.puntos_acreditados) == (True, 0, 0)
        [entry] = redeem_codes(engine, caller, [second], redemption()).resultados
        assert entry.result is not None
        assert (entry.result.duplicado, entry.result.puntos_acreditados) == (True, 0)
    assert ledger_credit_of_code(engine, first) == ledger_credit_of_code(engine, second) == 0


def test_a_live_redemption_answers_a_test_keys_retry_with_what_it_credited(engine, live, test_key):
    """Codes are not split by mode (a test key burns a code): the redemption credited
    PUNTOS, and that is what it credited, whoever asks."""
    [codigo] = take(1)
    redeem_code(engine, live, codigo, redemption())
    retry = redeem_code(engine, test_key, codigo, redemption())
    assert (retry.duplicado, retry.puntos_otorgados, retry.puntos_acreditados) == (
        True,
        0,
        PUNTOS,
    )


def test_a_code_redeemed_in_the_fixture_credited_nothing(engine, live):
    retry = redeem_code(engine, live, "A-FIX", redemption())
    assert (retry.duplicado, retry.puntos_acreditados) == (True, 0)


def test_a_text_repeated_in_a_batch_says_what_its_first_entry_credited(engine, live):
    [codigo] = take(1)
    entries = redeem_codes(engine, live, [codigo, codigo], redemption()).resultados
    results = [e.result for e in entries]
    assert all(r is not None for r in results)
    assert [(r.duplicado, r.puntos_otorgados, r.puntos_acreditados) for r in results if r] == [
        (False, PUNTOS, PUNTOS),
        (True, 0, PUNTOS),
    ]


def test_fifty_identical_redemptions_at_once_credit_once_and_all_say_what(engine, live):
    [codigo] = take(1)
    results: list[RedeemResult] = run_together(
        [partial(redeem_code, engine, live, codigo, redemption()) for _ in range(50)]
    )
    assert sorted(r.duplicado for r in results) == [False] + [True] * 49
    assert sum(r.puntos_otorgados for r in results) == PUNTOS
    assert {r.puntos_acreditados for r in results} == {PUNTOS}
    assert ledger_credit_of_code(engine, codigo) == PUNTOS


def test_a_retry_that_waited_for_the_redemption_says_what_it_credited(engine, live):
    """The race of issue 23 §2 made certain: a redemption holds the code's row lock (its
    transaction open, its ledger entry written) while a single retry and a batch retry wait
    for it; it commits. Both answer duplicado with the credit, which their statement that
    waited (its snapshot older than the commit) could not see: the credit is read after."""
    [codigo] = take(1)
    with engine.connect() as conn:
        copia, fan_pk = conn.execute(
            select(codigos.c.id, codigos.c.fan_pk).where(
                codigos.c.programa_id == P, codigos.c.codigo == codigo
            )
        ).one()
    with UnitOfWork(engine) as uow:
        uow.conn.execute(codigos.update().where(codigos.c.id == copia).values(estado="canjeado"))
        move_points(uow.conn, P, fan_pk, PUNTOS, Motivo.CANJE, codigo_id=copia)
        answers: list[Any] = []
        threads = [
            threading.Thread(
                target=lambda: answers.append(redeem_code(engine, live, codigo, redemption()))
            ),
            threading.Thread(
                target=lambda: answers.append(
                    redeem_codes(engine, live, [codigo], redemption()).resultados[0].result
                )
            ),
        ]
        for thread in threads:
            thread.start()
        wait_for_lock_waiters(engine, 2)
        uow.commit()
    for thread in threads:
        thread.join(60)
    assert [(a.duplicado, a.puntos_otorgados, a.puntos_acreditados) for a in answers] == [
        (True, 0, PUNTOS)
    ] * 2


def test_batches_and_singles_at_once_credit_each_code_once_and_all_say_what(engine, live):
    """Eight identical batches of 20 codes and a single redemption of each code, all at
    once: each code is credited once, and every answer, first or duplicate, batch or single,
    carries the code's credit."""
    texts = take(20)
    calls: list[Callable[[], Any]] = [
        partial(redeem_codes, engine, live, texts, redemption()) for _ in range(8)
    ]
    calls += [partial(redeem_code, engine, live, c, redemption()) for c in reversed(texts)]
    results = run_together(calls)
    answers: list[RedeemResult] = list(results[8:])
    for batch in results[:8]:
        assert batch.resumen.rechazados == 0
        answers += [e.result for e in batch.resultados]
    assert len(answers) == 8 * 20 + 20
    assert sum(not a.duplicado for a in answers) == 20
    assert sum(a.puntos_otorgados for a in answers) == 20 * PUNTOS
    assert {a.puntos_acreditados for a in answers} == {PUNTOS}
    assert {c: ledger_credit_of_code(engine, c) for c in texts} == dict.fromkeys(texts, PUNTOS)
    assert_ledger_consistent(engine)
