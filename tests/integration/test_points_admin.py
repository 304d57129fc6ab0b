"""Support-desk points operations on a real PostgreSQL, called directly: the ledger with
its running balance, manual adjustments, voiding sales (once, also under concurrency);
every failure leaves the database exactly as it was, and the ledger always sums to the
cached balance."""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import Engine, func, insert, select, text
from sqlalchemy.exc import IntegrityError

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.keys import Modo
from loyalty_grpc.services.backoffice import fans, keys, programs, promos
from loyalty_grpc.services.backoffice import points as points_admin
from loyalty_grpc.services.backoffice.points import AJUSTE_MAX, LedgerEntryInfo
from loyalty_grpc.store import uow
from loyalty_grpc.store.ledger import Motivo, move_points
from loyalty_grpc.store.tables import (
    LEDGER_MISMATCH_SQL,
    codigos,
    movimientos,
    ventas,
)
from loyalty_grpc.store.tables import fans as fans_table
from loyalty_grpc.store.uow import run_in_uow
from tests.support import fails, snapshot, wait_for_lock_waiters

P = "halcones"
OTRO = "otro"

_seq = itertools.count(1)


# ---------------------------------------------------------------- helpers


def assert_ledger_consistent(engine: Engine) -> None:
    with engine.connect() as conn:
        assert conn.execute(text(LEDGER_MISMATCH_SQL)).all() == []


@pytest.fixture(scope="module", autouse=True)
def clave(engine: Engine) -> dict[str, int]:
    """The programs, and a key id of each (a sale names the key that made it)."""
    ids = {}
    for programa, nombre in [(P, "Club Halcones"), (OTRO, "Otro Club")]:
        run_in_uow(engine, programs.upsert_program, programa, nombre, "0.1")
        ids[programa] = run_in_uow(
            engine, keys.issue_key, programa, "Caja", "vivo", ["tx:escribir"]
        ).info.id
    return ids


def new_fan(engine: Engine, programa: str = P) -> fans.FanInfo:
    fid = f"PA{next(_seq):04d}"
    return run_in_uow(
        engine,
        fans.register_fan,
        programa,
        fid,
        nombre="Ana",
        correo=f"{fid.lower()}@example.com",
        socio_desde=2018,
    )


def fan_pk(engine: Engine, fan: fans.FanInfo) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(fans_table.c.pk).where(
                    fans_table.c.programa_id == fan.programa, fans_table.c.fan_id == fan.fan_id
                )
            ).scalar_one()
        )


def balance(engine: Engine, fan: fans.FanInfo) -> int:
    return run_in_uow(engine, fans.get_fan, fan.programa, fan.fan_id).puntos


def new_sale(
    engine: Engine, clave: dict[str, int], fan: fans.FanInfo, puntos: int, *, modo: Modo = Modo.VIVO
) -> int:
    """A sale as the POS would record it: the ventas row and, when live, its credit."""
    pk = fan_pk(engine, fan)
    with engine.begin() as conn:
        folio = int(
            conn.execute(
                insert(ventas)
                .values(
                    id=func.nextval("ventas_folio_seq"),
                    programa_id=fan.programa,
                    modo=modo.value,
                    id_externo=f"EXT-{next(_seq)}",
                    fan_pk=pk,
                    importe_centavos=puntos * 1000,
                    moneda="MXN",
                    terminal="Caja 1",
                    ts=func.now(),
                    puntos=puntos if modo is Modo.VIVO else 0,
                    clave_id=clave[fan.programa],
                )
                .returning(ventas.c.id)
            ).scalar_one()
        )
        if modo is Modo.VIVO:
            move_points(conn, fan.programa, pk, puntos, Motivo.VENTA, venta_id=folio)
    return folio


def sale_row(engine: Engine, folio: int) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(conn.execute(select(ventas).where(ventas.c.id == folio)).one()._mapping)


def ledger_rows(engine: Engine, fan: fans.FanInfo) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                select(
                    movimientos.c.puntos,
                    movimientos.c.motivo,
                    movimientos.c.venta_id,
                    movimientos.c.nota,
                )
                .where(movimientos.c.fan_pk == fan_pk(engine, fan))
                .order_by(movimientos.c.id)
            )
        ]


# ---------------------------------------------------------------- ledger


def test_ledger_oldest_first_with_running_balance_and_details(engine, clave):
    fan = new_fan(engine)
    folio = new_sale(engine, clave, fan, 100)
    run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, 20, " regalo de cumpleaños ")
    promo = run_in_uow(
        engine,
        promos.create_promo,
        P,
        f"Canje {next(_seq)}",
        vigencia_fin="2099-12-31",
        puntos_canje=50,
    )
    pk = fan_pk(engine, fan)
    with engine.begin() as conn:
        code_pk = conn.execute(
            insert(codigos)
            .values(
                promo_id=promo.id, programa_id=P, codigo="HD-0001", estado="canjeado", fan_pk=pk
            )
            .returning(codigos.c.id)
        ).scalar_one()
        move_points(conn, P, pk, 50, Motivo.CANJE, codigo_id=code_pk)
    run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, -30, "corrección")

    info, entries = run_in_uow(
        uow.snapshot(engine), points_admin.get_ledger, P, f" {fan.fan_id.lower()} "
    )
    assert info.fan_id == fan.fan_id
    assert info.puntos == 140
    assert [(e.motivo, e.puntos, e.saldo, e.venta_id, e.codigo, e.nota) for e in entries] == [
        (Motivo.VENTA, 100, 100, folio, None, ""),
        (Motivo.AJUSTE, 20, 120, None, None, "regalo de cumpleaños"),
        (Motivo.CANJE, 50, 170, None, "HD-0001", ""),
        (Motivo.AJUSTE, -30, 140, None, None, "corrección"),
    ]
    assert [e.id for e in entries] == sorted(e.id for e in entries)
    assert all(isinstance(e.creado, datetime) and e.creado.tzinfo is not None for e in entries)
    assert entries[-1].saldo == info.puntos
    assert_ledger_consistent(engine)


def test_ledger_of_a_fan_without_entries_and_of_a_fan_in_baja(engine):
    fan = new_fan(engine)
    info, entries = run_in_uow(uow.snapshot(engine), points_admin.get_ledger, P, fan.fan_id)
    assert (info.puntos, entries) == (0, [])
    run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, 5, "alta")
    run_in_uow(engine, fans.deactivate_fan, P, fan.fan_id, "pide la baja")
    info, entries = run_in_uow(uow.snapshot(engine), points_admin.get_ledger, P, fan.fan_id)
    assert info.estado.value == "baja"
    assert [e.saldo for e in entries] == [5]


def test_ledger_errors(engine):
    fan = new_fan(engine)
    with fails(engine, CodigoError.PROGRAMA_NO_ENCONTRADO):
        run_in_uow(uow.snapshot(engine), points_admin.get_ledger, "nadie", fan.fan_id)
    with fails(engine, CodigoError.FAN_NO_ENCONTRADO, "NOEXISTE"):
        run_in_uow(uow.snapshot(engine), points_admin.get_ledger, P, "noexiste")
    with fails(engine, CodigoError.FAN_NO_ENCONTRADO):  # the fan belongs to another program
        run_in_uow(uow.snapshot(engine), points_admin.get_ledger, OTRO, fan.fan_id)
    with fails(engine, CodigoError.CAMPO_REQUERIDO, "fan"):
        run_in_uow(uow.snapshot(engine), points_admin.get_ledger, P, "  ")
    with fails(engine, CodigoError.SOLICITUD_INVALIDA, "programa"):
        run_in_uow(uow.snapshot(engine), points_admin.get_ledger, "No Válido", fan.fan_id)
    # The fan's balance and its ledger must come from one snapshot: READ COMMITTED is refused.
    with pytest.raises(RuntimeError, match="REPEATABLE READ"):
        run_in_uow(engine, points_admin.get_ledger, P, fan.fan_id)


# ---------------------------------------------------------------- adjustments


def test_adjust_credit_then_debit(engine):
    fan = new_fan(engine)
    credit = run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, 250, "compensación")
    assert isinstance(credit, LedgerEntryInfo)
    assert (
        credit.motivo,
        credit.puntos,
        credit.saldo,
        credit.nota,
        credit.venta_id,
        credit.codigo,
    ) == (Motivo.AJUSTE, 250, 250, "compensación", None, None)
    debit = run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, -250, "error de captura")
    assert (debit.puntos, debit.saldo) == (-250, 0)
    assert debit.id > credit.id
    assert balance(engine, fan) == 0
    _, entries = run_in_uow(uow.snapshot(engine), points_admin.get_ledger, P, fan.fan_id)
    assert entries == [credit, debit]
    assert_ledger_consistent(engine)


def test_adjust_refusals_change_nothing(engine):
    fan = new_fan(engine)
    run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, 40, "inicial")
    with fails(engine, CodigoError.SOLICITUD_INVALIDA, "saldo es 40", "41"):
        run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, -41, "demasiado")
    with fails(engine, CodigoError.SOLICITUD_INVALIDA, "puntos"):
        run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, 0, "nada")
    with fails(engine, CodigoError.SOLICITUD_INVALIDA, "puntos"):
        run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, AJUSTE_MAX + 1, "enorme")
    with fails(engine, CodigoError.CAMPO_REQUERIDO, "motivo"):
        run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, 10, "   ")
    with fails(engine, CodigoError.SOLICITUD_INVALIDA, "motivo"):
        run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, 10, "dos\nlíneas")
    with fails(engine, CodigoError.FAN_NO_ENCONTRADO):
        run_in_uow(engine, points_admin.adjust_points, P, "NOEXISTE", 10, "x")
    with fails(engine, CodigoError.PROGRAMA_NO_ENCONTRADO):
        run_in_uow(engine, points_admin.adjust_points, "nadie", fan.fan_id, 10, "x")
    assert balance(engine, fan) == 40
    # Exactly down to zero is allowed.
    assert run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, -40, "a cero").saldo == 0
    assert_ledger_consistent(engine)


def test_adjust_a_fan_in_baja(engine):
    fan = new_fan(engine)
    run_in_uow(engine, fans.deactivate_fan, P, fan.fan_id, "pide la baja")
    entry = run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, 15, "corrección previa")
    assert entry.saldo == 15
    assert run_in_uow(engine, fans.get_fan, P, fan.fan_id).estado.value == "baja"


def test_concurrent_debits_never_go_below_zero(engine):
    """The fan's row is locked by someone else; two debits of 70 out of 100 queue behind
    it. When it is released exactly one goes through."""
    fan = new_fan(engine)
    run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, 100, "inicial")

    def debit() -> str:
        try:
            run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, -70, "carrera")
        except LoyaltyError as err:
            return f"{err.codigo.value}: {err.detalle}"
        return "ok"

    with engine.connect() as other:
        other.begin()
        other.execute(
            select(fans_table.c.pk)
            .where(fans_table.c.programa_id == P, fans_table.c.pk == fan_pk(engine, fan))
            .with_for_update()
        )
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(debit) for _ in range(2)]
            wait_for_lock_waiters(engine, 2)
            other.rollback()
            results = sorted(f.result(timeout=10) for f in futures)
    assert results[0] == "ok"
    assert results[1].startswith("solicitud_invalida: puntos: el saldo es 30;"), results
    assert balance(engine, fan) == 30
    assert_ledger_consistent(engine)


# ---------------------------------------------------------------- voids


def test_void_reverses_once_and_keeps_the_sale(engine, clave):
    fan = new_fan(engine)
    folio = new_sale(engine, clave, fan, 100)
    other = new_sale(engine, clave, fan, 7)
    before = sale_row(engine, folio)

    result = run_in_uow(engine, points_admin.void_sale, P, folio, " devolución en caja ")
    assert (result.revertidos, result.ya_anulada) == (100, False)
    sale = result.sale
    assert (
        sale.folio,
        sale.programa,
        sale.modo,
        sale.fan,
        sale.id_externo,
        sale.puntos,
        sale.terminal,
        sale.sitio,
    ) == (folio, P, Modo.VIVO, fan.fan_id, before["id_externo"], 100, "Caja 1", None)
    assert sale.anulada_en is not None
    after = sale_row(engine, folio)
    assert after["anulada_en"] == sale.anulada_en
    assert {k: v for k, v in after.items() if k != "anulada_en"} == {
        k: v for k, v in before.items() if k != "anulada_en"
    }
    assert balance(engine, fan) == 7
    assert ledger_rows(engine, fan) == [
        (100, "venta", folio, ""),
        (7, "venta", other, ""),
        (-100, "anulacion", folio, "devolución en caja"),
    ]
    _, entries = run_in_uow(uow.snapshot(engine), points_admin.get_ledger, P, fan.fan_id)
    assert [(e.motivo, e.venta_id, e.saldo) for e in entries][-1] == (Motivo.ANULACION, folio, 7)

    state = snapshot(engine)
    again = run_in_uow(engine, points_admin.void_sale, P, folio, "otra vez")
    assert (again.revertidos, again.ya_anulada) == (0, True)
    assert again.sale == sale
    assert snapshot(engine) == state
    assert sale_row(engine, other)["anulada_en"] is None

    # Still on record: its id_externo stays taken in its namespace.
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(
            insert(ventas).values(
                id=func.nextval("ventas_folio_seq"),
                programa_id=P,
                modo="vivo",
                id_externo=before["id_externo"],
                fan_pk=before["fan_pk"],
                importe_centavos=1,
                moneda="MXN",
                ts=func.now(),
                puntos=0,
                clave_id=clave[P],
            )
        )
    assert_ledger_consistent(engine)


def test_void_after_the_points_were_spent_goes_negative(engine, clave):
    fan = new_fan(engine)
    folio = new_sale(engine, clave, fan, 100)
    run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, -80, "canje en taquilla")
    result = run_in_uow(engine, points_admin.void_sale, P, folio, "contracargo")
    assert result.revertidos == 100
    assert balance(engine, fan) == -80
    # Debits are refused while negative; a credit is allowed even if it stays negative.
    with fails(engine, CodigoError.SOLICITUD_INVALIDA, "saldo es -80"):
        run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, -1, "x")
    assert run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, 30, "acuerdo").saldo == -50
    assert_ledger_consistent(engine)


def test_void_of_a_test_sale_writes_no_ledger_entry(engine, clave):
    fan = new_fan(engine)
    run_in_uow(engine, points_admin.adjust_points, P, fan.fan_id, 10, "inicial")
    folio = new_sale(engine, clave, fan, 55, modo=Modo.PRUEBA)
    result = run_in_uow(engine, points_admin.void_sale, P, folio, "prueba")
    assert (result.revertidos, result.ya_anulada, result.sale.modo) == (0, False, Modo.PRUEBA)
    assert result.sale.anulada_en is not None
    assert ledger_rows(engine, fan) == [(10, "ajuste", None, "inicial")]
    assert balance(engine, fan) == 10
    assert run_in_uow(engine, points_admin.void_sale, P, folio, "prueba").ya_anulada


def test_void_of_a_fan_in_baja(engine, clave):
    fan = new_fan(engine)
    folio = new_sale(engine, clave, fan, 12)
    run_in_uow(engine, fans.deactivate_fan, P, fan.fan_id, "baja")
    assert run_in_uow(engine, points_admin.void_sale, P, folio, "devolución").revertidos == 12
    assert balance(engine, fan) == 0


def test_void_errors_change_nothing(engine, clave):
    fan = new_fan(engine)
    folio = new_sale(engine, clave, fan, 9)
    with fails(engine, CodigoError.VENTA_NO_ENCONTRADA, "987654"):
        run_in_uow(engine, points_admin.void_sale, P, 987654, "x")
    with fails(engine, CodigoError.VENTA_NO_ENCONTRADA):  # a sale of another program
        run_in_uow(engine, points_admin.void_sale, OTRO, folio, "x")
    with fails(engine, CodigoError.PROGRAMA_NO_ENCONTRADO):
        run_in_uow(engine, points_admin.void_sale, "nadie", folio, "x")
    for bad in (0, -1, 2**31):
        with fails(engine, CodigoError.SOLICITUD_INVALIDA, "folio"):
            run_in_uow(engine, points_admin.void_sale, P, bad, "x")
    with fails(engine, CodigoError.CAMPO_REQUERIDO, "motivo"):
        run_in_uow(engine, points_admin.void_sale, P, folio, "")
    assert sale_row(engine, folio)["anulada_en"] is None


def _void_race(engine: Engine, folio: int, *, hold_lock: bool) -> list[tuple[int, bool]]:
    barrier = threading.Barrier(2)

    def void() -> tuple[int, bool]:
        barrier.wait()
        result = run_in_uow(engine, points_admin.void_sale, P, folio, "carrera")
        return result.revertidos, result.ya_anulada

    with engine.connect() as other:
        other.begin()
        if hold_lock:
            other.execute(
                select(ventas.c.id)
                .where(ventas.c.programa_id == P, ventas.c.id == folio)
                .with_for_update()
            )
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(void) for _ in range(2)]
            if hold_lock:
                wait_for_lock_waiters(engine, 2)
            other.rollback()
            return sorted(f.result(timeout=10) for f in futures)


@pytest.mark.parametrize(("hold_lock", "round_"), [(True, 0), (False, 1), (False, 2), (False, 3)])
def test_concurrent_voids_reverse_once(engine, clave, hold_lock, round_):
    """Two voids of one sale at once (with `hold_lock`, both are certainly waiting on the
    sale's row when it is released): one reversal, the other finds it voided."""
    fan = new_fan(engine)
    folio = new_sale(engine, clave, fan, 60)
    assert _void_race(engine, folio, hold_lock=hold_lock) == [(0, True), (60, False)]
    assert [r for r in ledger_rows(engine, fan) if r[1] == "anulacion"] == [
        (-60, "anulacion", folio, "carrera")
    ]
    assert balance(engine, fan) == 0
    assert_ledger_consistent(engine)


def test_ledger_sums_to_the_balance_after_everything(engine):
    assert_ledger_consistent(engine)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(movimientos)).scalar_one() > 0
