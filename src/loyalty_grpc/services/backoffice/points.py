"""Back office (support desk): a fan's points ledger, manual adjustments, voiding a sale.

Points move only through store.ledger.move_points, so the ledger and the cached balance
stay equal; the ledger and sale reads are in store/points.py (`LedgerEntryInfo`, `SaleInfo`
live there). Decisions:

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

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.fans import canonical_fan_id
from loyalty_grpc.domain.integers import INT32_MAX
from loyalty_grpc.domain.programs import program_id
from loyalty_grpc.domain.text import single_line
from loyalty_grpc.store import lookups
from loyalty_grpc.store import points as store
from loyalty_grpc.store.fans import FanInfo
from loyalty_grpc.store.ledger import Motivo, move_points
from loyalty_grpc.store.points import LedgerEntryInfo, SaleInfo
from loyalty_grpc.store.uow import UnitOfWork

__all__ = [
    "AJUSTE_MAX",
    "FOLIO_MAX",
    "LedgerEntryInfo",
    "SaleInfo",
    "VoidResult",
    "adjust_points",
    "get_ledger",
    "void_sale",
]

# Largest manual adjustment, either way (keeps balances far from BIGINT overflow).
AJUSTE_MAX = 1_000_000_000
# ventas.id is an INTEGER.
FOLIO_MAX = INT32_MAX


@dataclass(frozen=True)
class VoidResult:
    sale: SaleInfo
    # Points taken back by this call (0 when it had been voided before, or credited none).
    revertidos: int
    # True when the sale had been voided before: nothing changed.
    ya_anulada: bool


# ------------------------------------------------------------------ ledger


def get_ledger(
    uow: UnitOfWork, programa: str, fan_id: str
) -> tuple[FanInfo, list[LedgerEntryInfo]]:
    """The fan (any state) and its ledger, oldest first; the last entry's `saldo` is the
    fan's `puntos`. `uow` must read one snapshot (a unit of work on `snapshot(engine)`)."""
    if not uow.reads_snapshot():
        raise RuntimeError("get_ledger needs a REPEATABLE READ transaction (snapshot(engine))")
    programa = program_id(programa, "programa")
    fid = canonical_fan_id(fan_id, "fan")
    fan = lookups.require_fan(uow.conn, programa, fid)
    return fan.info, store.ledger(uow.conn, programa, fan.pk)


def adjust_points(
    uow: UnitOfWork, programa: str, fan_id: str, puntos: int, motivo: str
) -> LedgerEntryInfo:
    """A manual `ajuste` entry of `puntos` (credit > 0, debit < 0) with `motivo` as its
    nota; returns the entry. A debit that would leave the balance below 0 is refused."""
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
    fan = lookups.require_fan(uow.conn, programa, fid, lock=True)
    if puntos < 0 and fan.puntos + puntos < 0:
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA,
            f"puntos: el saldo es {fan.puntos}; un cargo de {-puntos} lo dejaría negativo",
        )
    move_points(uow.conn, programa, fan.pk, puntos, Motivo.AJUSTE, nota=nota)
    return store.last_entry(uow.conn, programa, fan.pk)


# ------------------------------------------------------------------ sales


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
    programa = program_id(programa, "programa")
    folio = _check_folio(folio)
    nota = single_line(motivo, "motivo")
    sale = store.lock_sale(uow.conn, programa, folio)
    if sale is None:
        lookups.require_program(uow.conn, programa)
        raise LoyaltyError(
            CodigoError.VENTA_NO_ENCONTRADA, f"folio: no existe la venta {folio} en {programa}"
        )
    if sale.info.anulada_en is not None:
        return VoidResult(sale.info, revertidos=0, ya_anulada=True)
    anulada_en = store.mark_voided(uow.conn, programa, folio)
    credited = store.credited(uow.conn, programa, folio, sale.fan_pk)
    if credited != 0:
        move_points(
            uow.conn, programa, sale.fan_pk, -credited, Motivo.ANULACION, venta_id=folio, nota=nota
        )
    return VoidResult(
        replace(sale.info, anulada_en=anulada_en), revertidos=credited, ya_anulada=False
    )
