"""Back office (support desk): a fan's points ledger, manual adjustments, voiding a sale.

Points move only through store.ledger.move_points, so the ledger and the cached balance
stay equal. Decisions:

- The ledger is read in one REPEATABLE READ transaction (the caller opens it on
  `snapshot(engine)`, store/uow.py): the fan's balance and the last running balance come
  from the same snapshot, even while sales go on.
- An adjustment locks the fan's row first (FOR UPDATE), so the "no debit below 0" check and
  the debit are atomic against concurrent sales, redemptions and adjustments. A credit is always
  allowed, even when the balance stays negative (it can be negative after a void).
- A fan in `baja` can be adjusted and its sales voided: `baja` hides the fan from the POS
  API, not from the back office, and support must still be able to correct the record.
- A void locks the sale's row (FOR UPDATE), so concurrent voids of one sale reverse it once;
  the later ones find it voided and change nothing (`ya_anulada`). The sale is never
  deleted or altered except for `anulada_en`, so its `id_externo` stays taken.
- A void takes back what the ledger says the sale credited (the sum of the entries that
  name the sale; 0 for a test sale), even when the fan has spent the points already: the
  balance may then go negative, and the ledger shows why.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Row,
    Select,
    cast,
    func,
    select,
    update,
)

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.fans import canonical_fan_id
from loyalty_grpc.domain.integers import INT32_MAX
from loyalty_grpc.domain.keys import Modo
from loyalty_grpc.domain.programs import program_id
from loyalty_grpc.domain.text import single_line
from loyalty_grpc.services.backoffice.fans import FanInfo, fan_info
from loyalty_grpc.services.backoffice.lookups import require_fan, require_program
from loyalty_grpc.store.ledger import Motivo, move_points
from loyalty_grpc.store.tables import codigos, fans, movimientos, ventas
from loyalty_grpc.store.uow import UnitOfWork, reads_snapshot

# Largest manual adjustment, either way (keeps balances far from BIGINT overflow).
AJUSTE_MAX = 1_000_000_000
# ventas.id is an INTEGER.
FOLIO_MAX = INT32_MAX


@dataclass(frozen=True)
class LedgerEntryInfo:
    id: int
    puntos: int
    motivo: Motivo
    # The sale's folio (venta, anulacion); None otherwise.
    venta_id: int | None
    # The coupon code redeemed (canje); None otherwise.
    codigo: str | None
    nota: str
    creado: datetime
    # The fan's balance after this entry.
    saldo: int


@dataclass(frozen=True)
class SaleInfo:
    folio: int
    programa: str
    modo: Modo
    id_externo: str
    # Fan ID.
    fan: str
    importe_centavos: int
    moneda: str
    terminal: str | None
    sitio: str | None
    ts: datetime
    puntos: int
    creado: datetime
    # None while the sale stands.
    anulada_en: datetime | None


@dataclass(frozen=True)
class VoidResult:
    sale: SaleInfo
    # Points taken back by this call (0 when it had been voided before, or credited none).
    revertidos: int
    # True when the sale had been voided before: nothing changed.
    ya_anulada: bool


# ------------------------------------------------------------------ ledger


def _ledger_query(fan_pk: int) -> Select[Any]:
    """The fan's entries, oldest first, each with the balance after it (a window sum)."""
    m = movimientos.c
    saldo = cast(func.sum(m.puntos).over(order_by=m.id), BigInteger)
    return (
        select(
            m.id,
            m.puntos,
            m.motivo,
            m.venta_id,
            codigos.c.codigo,
            m.nota,
            m.creado,
            saldo.label("saldo"),
        )
        .select_from(movimientos.outerjoin(codigos, codigos.c.id == m.codigo_id))
        .where(m.fan_pk == fan_pk)
        .order_by(m.id)
    )


def _entry(row: Row[*tuple[Any, ...]]) -> LedgerEntryInfo:
    return LedgerEntryInfo(
        id=row.id,
        puntos=row.puntos,
        motivo=Motivo(row.motivo),
        venta_id=row.venta_id,
        codigo=row.codigo,
        nota=row.nota,
        creado=row.creado,
        saldo=row.saldo,
    )


def get_ledger(
    uow: UnitOfWork, programa: str, fan_id: str
) -> tuple[FanInfo, list[LedgerEntryInfo]]:
    """The fan (any state) and its ledger, oldest first; the last entry's `saldo` is the
    fan's `puntos`. `conn` must read one snapshot (a unit of work on `snapshot(engine)`)."""
    conn = uow.conn
    if not reads_snapshot(conn):
        raise RuntimeError("get_ledger needs a REPEATABLE READ transaction (snapshot(engine))")
    programa = program_id(programa, "programa")
    fid = canonical_fan_id(fan_id, "fan")
    fan = require_fan(uow, programa, fid)
    entries = [_entry(r) for r in conn.execute(_ledger_query(fan.pk))]
    return fan_info(fan), entries


def _last_entry(uow: UnitOfWork, fan_pk: int) -> LedgerEntryInfo:
    conn = uow.conn
    ledger = _ledger_query(fan_pk).subquery()
    return _entry(conn.execute(select(ledger).order_by(ledger.c.id.desc()).limit(1)).one())


def adjust_points(
    uow: UnitOfWork, programa: str, fan_id: str, puntos: int, motivo: str
) -> LedgerEntryInfo:
    """A manual `ajuste` entry of `puntos` (credit > 0, debit < 0) with `motivo` as its
    nota; returns the entry. A debit that would leave the balance below 0 is refused."""
    conn = uow.conn
    programa = program_id(programa, "programa")
    fid = canonical_fan_id(fan_id, "fan")
    if puntos == 0:
        raise LoyaltyError(CodigoError.SOLICITUD_INVALIDA, "puntos: no puede ser 0")
    if abs(puntos) > AJUSTE_MAX:
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA,
            f"puntos: a lo más {AJUSTE_MAX} en un ajuste, a favor o en contra",
        )
    nota = single_line(motivo, "motivo")
    fan = require_fan(uow, programa, fid, lock=True)
    if puntos < 0 and fan.puntos + puntos < 0:
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA,
            f"puntos: el saldo es {fan.puntos}; un cargo de {-puntos} lo dejaría negativo",
        )
    move_points(conn, fan.pk, puntos, Motivo.AJUSTE, nota=nota)
    return _last_entry(uow, fan.pk)


# ------------------------------------------------------------------ sales


def _sale_query(programa: str, folio: int) -> Select[Any]:
    return (
        select(ventas, fans.c.fan_id)
        .join(fans, fans.c.pk == ventas.c.fan_pk)
        .where(ventas.c.programa_id == programa, ventas.c.id == folio)
    )


def _sale_info(row: Row[*tuple[Any, ...]]) -> SaleInfo:
    return SaleInfo(
        folio=row.id,
        programa=row.programa_id,
        modo=Modo(row.modo),
        id_externo=row.id_externo,
        fan=row.fan_id,
        importe_centavos=row.importe_centavos,
        moneda=row.moneda,
        terminal=row.terminal,
        sitio=row.sitio,
        ts=row.ts,
        puntos=row.puntos,
        creado=row.creado,
        anulada_en=row.anulada_en,
    )


def _check_folio(folio: int) -> int:
    if not 1 <= folio <= FOLIO_MAX:
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA,
            "folio: debe ser el folio de una venta (un entero de 1 o más)",
        )
    return folio


def void_sale(uow: UnitOfWork, programa: str, folio: int, motivo: str) -> VoidResult:
    """Void the program's sale `folio` now: one `anulacion` entry (nota = `motivo`) takes
    back what the sale credited. Voiding a voided sale changes nothing (`ya_anulada`)."""
    conn = uow.conn
    programa = program_id(programa, "programa")
    folio = _check_folio(folio)
    nota = single_line(motivo, "motivo")
    sale = conn.execute(_sale_query(programa, folio).with_for_update(of=ventas)).one_or_none()
    if sale is None:
        require_program(uow, programa)
        raise LoyaltyError(
            CodigoError.VENTA_NO_ENCONTRADA, f"folio: no existe la venta {folio} en {programa}"
        )
    if sale.anulada_en is not None:
        return VoidResult(_sale_info(sale), revertidos=0, ya_anulada=True)
    anulada_en = conn.execute(
        update(ventas)
        .where(ventas.c.id == folio)
        .values(anulada_en=func.now())
        .returning(ventas.c.anulada_en)
    ).scalar_one()
    credited = int(
        conn.execute(
            select(func.coalesce(func.sum(movimientos.c.puntos), 0)).where(
                movimientos.c.venta_id == folio, movimientos.c.fan_pk == sale.fan_pk
            )
        ).scalar_one()
    )
    if credited != 0:
        move_points(conn, sale.fan_pk, -credited, Motivo.ANULACION, venta_id=folio, nota=nota)
    return VoidResult(
        replace(_sale_info(sale), anulada_en=anulada_en), revertidos=credited, ya_anulada=False
    )
