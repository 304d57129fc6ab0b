"""Code deposit, inventory listing and next-code assignment on a real PostgreSQL, called
directly: exact counts under concurrent overlapping deposits, distinct codes under
concurrent assignment, one statement for the listing, and failures that change nothing."""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
from sqlalchemy import Engine, event, func, select

from loyalty_grpc.domain.codes import CodeBatch, PromoRef, code_batch_of_list
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.promos import EstadoCodigo, EstadoPromo
from loyalty_grpc.services.backoffice import codes, fans, programs, promos
from loyalty_grpc.services.pos.codes import deposit_codes
from loyalty_grpc.services.pos.promos import Inventario, list_promos
from loyalty_grpc.store.tables import codigos
from loyalty_grpc.store.tables import promos as promos_table
from loyalty_grpc.store.uow import UnitOfWork, run_in_uow

P = "depo"
OTRO = "depo2"
_names = itertools.count()
T = TypeVar("T")


@pytest.fixture(scope="module", autouse=True)
def _programs(engine: Engine) -> None:
    run_in_uow(engine, programs.upsert_program, P, "Club Depósitos", "0.1")
    run_in_uow(engine, programs.upsert_program, OTRO, "Otro Club", "0.1")
    for i in range(1, 41):
        run_in_uow(
            engine,
            fans.register_fan,
            P,
            f"D{i:03d}",
            nombre="Fan",
            correo=f"d{i}@example.com",
            socio_desde=2020,
        )
    run_in_uow(
        engine,
        fans.register_fan,
        P,
        "BAJA1",
        nombre="Fan",
        correo="baja1@example.com",
        socio_desde=2020,
    )
    run_in_uow(engine, fans.deactivate_fan, P, "BAJA1", "mudanza")


def new_promo(engine: Engine, programa: str = P, estado: str = "") -> int:
    return run_in_uow(
        engine,
        promos.create_promo,
        programa,
        f"Promo {next(_names)}",
        vigencia_fin="2099-12-31",
        estado=estado,
    ).id


def batch(*items: str) -> CodeBatch:
    return code_batch_of_list(list(items))


def rows(engine: Engine, promo_id: int) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        return [
            (r.codigo, r.estado)
            for r in conn.execute(
                select(codigos.c.codigo, codigos.c.estado)
                .where(codigos.c.promo_id == promo_id)
                .order_by(codigos.c.id)
            )
        ]


def total(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(codigos)).scalar_one())


def raises(codigo: CodigoError, fn: Callable[[], T]) -> LoyaltyError:
    with pytest.raises(LoyaltyError) as caught:
        fn()
    assert caught.value.codigo is codigo, caught.value
    return caught.value


# ---------------------------------------------------------------- deposit


def test_deposit_counts_and_inventory(engine):
    promo_id = new_promo(engine)
    first = deposit_codes(engine, P, PromoRef(promo_id, None), batch("A", "b", "C"))
    assert (first.recibidos, first.agregados, first.duplicados) == (3, 3, 0)
    assert first.inventario == Inventario(3, 0, 0, 0)
    assert first.promo.estado is EstadoPromo.ACTIVA
    again = deposit_codes(engine, P, PromoRef(None, first.promo.nombre.upper()), batch("c", "D"))
    assert (again.recibidos, again.agregados, again.duplicados) == (2, 1, 1)
    assert rows(engine, promo_id) == [
        ("A", "disponible"),
        ("B", "disponible"),
        ("C", "disponible"),
        ("D", "disponible"),
    ]


def test_numeric_name_is_found_when_no_promotion_has_that_id(engine):
    promo = run_in_uow(engine, promos.create_promo, P, "987654", vigencia_fin="2099-12-31")
    result = deposit_codes(engine, P, PromoRef(987654, "987654"), batch("N1"))
    assert result.promo.id == promo.id


def test_deposit_failures_change_nothing(engine):
    ended = new_promo(engine, estado="terminada")
    theirs = new_promo(engine, programa=OTRO)
    before = total(engine)
    error = raises(
        CodigoError.PROMO_NO_ADMITE_CODIGOS,
        lambda: deposit_codes(engine, P, PromoRef(ended, None), batch("X")),
    )
    assert "terminada" in error.detalle
    raises(
        CodigoError.PROMO_NO_ENCONTRADA,
        lambda: deposit_codes(engine, P, PromoRef(theirs, None), batch("X")),
    )
    raises(
        CodigoError.PROMO_NO_ENCONTRADA,
        lambda: deposit_codes(engine, P, PromoRef(None, "Nadie"), batch("X")),
    )
    raises(
        CodigoError.PROGRAMA_NO_ENCONTRADO,
        lambda: deposit_codes(engine, "noexiste", PromoRef(theirs, None), batch("X")),
    )
    assert total(engine) == before


def test_concurrent_overlapping_deposits_count_each_code_once(engine):
    """12 deposits of 2000 codes each, ranges overlapping by half, each in a shuffled
    order, all released at once: every code is added exactly once, the counts add up, no
    deadlock."""
    promo_id = new_promo(engine)
    calls, size, step = 12, 2000, 1000
    barrier = threading.Barrier(calls)

    def one(i: int) -> tuple[int, int, int]:
        items = [f"OV-{n:06d}" for n in range(i * step, i * step + size)]
        random.Random(i).shuffle(items)
        prepared = batch(*items)
        barrier.wait(30)
        r = deposit_codes(engine, P, PromoRef(promo_id, None), prepared)
        return r.recibidos, r.agregados, r.duplicados

    with ThreadPoolExecutor(calls) as pool:
        results = list(pool.map(one, range(calls)))
    unique = (calls - 1) * step + size
    assert all(r == size and a + d == size for r, a, d in results)
    assert sum(a for _, a, _ in results) == unique
    assert sum(d for _, _, d in results) == calls * size - unique
    assert len(rows(engine, promo_id)) == unique
    assert list_inventory(engine, promo_id) == Inventario(unique, 0, 0, 0)


def test_deposit_waits_for_a_concurrent_end_of_the_promotion(engine):
    """The promotion's row is held FOR SHARE by a deposit: ending it waits for the deposit,
    and a deposit after the end is refused."""
    promo_id = new_promo(engine)
    with UnitOfWork(engine) as uow:  # a deposit in flight holds the share lock
        uow.conn.execute(
            select(promos_table.c.id)
            .where(promos_table.c.programa_id == P, promos_table.c.id == promo_id)
            .with_for_update(read=True)
        )
        ended = threading.Event()

        def end() -> None:
            run_in_uow(engine, promos.update_promo, P, promo_id, estado="terminada")
            ended.set()

        thread = threading.Thread(target=end)
        thread.start()
        assert not ended.wait(0.5)
    thread.join(10)
    assert ended.is_set()
    raises(
        CodigoError.PROMO_NO_ADMITE_CODIGOS,
        lambda: deposit_codes(engine, P, PromoRef(promo_id, None), batch("LATE")),
    )


# ---------------------------------------------------------------- listing


def list_inventory(engine: Engine, promo_id: int) -> Inventario:
    return next(p.inventario for p in list_promos(engine, P) if p.id == promo_id)


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    yield seen
    event.remove(engine, "before_cursor_execute", record)


def test_listing_is_one_statement_with_every_state(engine, statements):
    promo_id = new_promo(engine)
    deposit_codes(engine, P, PromoRef(promo_id, None), batch(*(f"L{i}" for i in range(6))))
    run_in_uow(engine, codes.assign_code, P, promo_id, "L0", "D001")
    run_in_uow(engine, codes.assign_code, P, promo_id, "L1", "D001")
    run_in_uow(engine, codes.release_code, P, promo_id, "L1")
    run_in_uow(engine, codes.release_code, P, promo_id, "L2")
    with engine.begin() as conn:  # a redemption (the redeem use case is not this module's)
        conn.execute(
            codigos.update()
            .where(codigos.c.promo_id == promo_id, codigos.c.codigo == "L0")
            .values(estado=EstadoCodigo.CANJEADO.value)
        )
    for _ in range(3):
        new_promo(engine)
    statements.clear()
    listed = list_promos(engine, P)
    assert len([s for s in statements if s.lstrip().upper().startswith("SELECT")]) == 1
    assert [p.id for p in listed] == sorted(p.id for p in listed)
    mine = next(p for p in listed if p.id == promo_id)
    assert mine.inventario == Inventario(disponibles=3, asignados=0, canjeados=1, liberados=2)
    assert mine.admite_codigos
    assert all(p.inventario == Inventario(0, 0, 0, 0) for p in listed[-3:])
    assert all(p.id not in {q.id for q in list_promos(engine, OTRO)} for p in listed)


# ---------------------------------------------------------------- next code


def test_assign_next_takes_the_oldest_disponible(engine):
    """Oldest = deposited first (then, within one deposit, in code order)."""
    promo_id = new_promo(engine)
    deposit_codes(engine, P, PromoRef(promo_id, None), batch("Z9", "Z1"))
    deposit_codes(engine, P, PromoRef(promo_id, None), batch("A1"))
    run_in_uow(engine, codes.release_code, P, promo_id, "Z1")
    got = [run_in_uow(engine, codes.assign_next_code, P, promo_id, "d002") for _ in range(2)]
    assert [(c.codigo, c.estado, c.fan) for c in got] == [
        ("Z9", EstadoCodigo.ASIGNADO, "D002"),
        ("A1", EstadoCodigo.ASIGNADO, "D002"),
    ]
    before = total(engine), rows(engine, promo_id)
    error = raises(
        CodigoError.CODIGO_NO_ENCONTRADO,
        lambda: run_in_uow(engine, codes.assign_next_code, P, promo_id, "D002"),
    )
    assert "no tiene códigos disponibles" in error.detalle
    assert (total(engine), rows(engine, promo_id)) == before


def test_assign_next_failures(engine):
    promo_id = new_promo(engine)
    deposit_codes(engine, P, PromoRef(promo_id, None), batch("F1"))
    raises(
        CodigoError.FAN_NO_ENCONTRADO,
        lambda: run_in_uow(engine, codes.assign_next_code, P, promo_id, "BAJA1"),
    )
    raises(
        CodigoError.FAN_NO_ENCONTRADO,
        lambda: run_in_uow(engine, codes.assign_next_code, P, promo_id, "NADIE"),
    )
    raises(
        CodigoError.PROMO_NO_ENCONTRADA,
        lambda: run_in_uow(engine, codes.assign_next_code, OTRO, promo_id, "D001"),
    )
    raises(
        CodigoError.PROMO_NO_ENCONTRADA,
        lambda: run_in_uow(engine, codes.assign_next_code, P, 999999, "D001"),
    )
    assert rows(engine, promo_id) == [("F1", "disponible")]


def test_assign_next_skips_a_locked_code_without_waiting(engine):
    promo_id = new_promo(engine)
    deposit_codes(engine, P, PromoRef(promo_id, None), batch("K1", "K2"))
    with UnitOfWork(engine) as uow:
        uow.conn.execute(
            select(codigos.c.id)
            .where(
                codigos.c.programa_id == P, codigos.c.promo_id == promo_id, codigos.c.codigo == "K1"
            )
            .with_for_update()
        )
        with ThreadPoolExecutor(1) as pool:
            got = pool.submit(
                run_in_uow, engine, codes.assign_next_code, P, promo_id, "D003"
            ).result(5)
    assert got.codigo == "K2"


def test_concurrent_assign_next_gives_distinct_codes(engine):
    """30 concurrent calls for 25 codes: 25 distinct codes (the 25 there are), 5 clear
    errors, nobody waits for anybody."""
    promo_id = new_promo(engine)
    deposit_codes(engine, P, PromoRef(promo_id, None), batch(*(f"C{i:03d}" for i in range(25))))
    calls = 30
    barrier = threading.Barrier(calls)

    def one(i: int) -> str | CodigoError:
        barrier.wait(30)
        try:
            return run_in_uow(engine, codes.assign_next_code, P, promo_id, f"D{i + 1:03d}").codigo
        except LoyaltyError as exc:
            return exc.codigo

    with ThreadPoolExecutor(calls) as pool:
        results = list(pool.map(one, range(calls)))
    got = [r for r in results if not isinstance(r, CodigoError)]  # (a CodigoError is a str too)
    assert sorted(got) == [f"C{i:03d}" for i in range(25)]
    assert [r for r in results if isinstance(r, CodigoError)] == [
        CodigoError.CODIGO_NO_ENCONTRADO
    ] * 5
    assert list_inventory(engine, promo_id) == Inventario(0, 25, 0, 0)
