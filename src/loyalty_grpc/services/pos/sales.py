"""`tx`: register a closed sale and credit its points, exactly once per `id_externo`.

One statement (store/sale.py): the fan lookup, the sale, its ledger entry, the new balance
and the wallet-pass outbox row, atomic, in one round trip. The sale's folio is taken before
it, from the process's block of folios (store/folios.py: one round trip per 64 sales); a
sale that turns out to be a duplicate leaves its folio unused (folios have gaps, never
repeats). Idempotency rests on the unique
(program, mode, id_externo) index: `INSERT … ON CONFLICT DO NOTHING` makes a concurrent
identical call wait for the first to commit and then see it, so 50 identical calls credit
once. The program's rate and currency come with the authenticated key (api/key_cache.py).

Two point figures answer every sale: `puntos_otorgados`, what THIS call credited (0 on a
duplicate, the contract's meaning), and `puntos_acreditados`, what the sale credited when
it was applied, the same on the first answer and on every retry's, so that a till whose
first answer was lost still shows the fan what the sale earned. A first sale has it
without any work (it is `puntos_otorgados`); a retry reads it from the sale's own row
(`ventas.puntos`) in the statement the retry already runs (store/sale.py ORIGINAL). A sale
voided since by the back office keeps its figure: the retry answers what the first answer
said; the void shows in `saldo` and in the ledger (its own `anulacion` entry).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from loyalty_grpc.domain.amounts import points_for
from loyalty_grpc.domain.ascii import ascii_upper
from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.fan_ref import FanRef, not_found
from loyalty_grpc.domain.integers import INT32_MAX
from loyalty_grpc.store.db import Database
from loyalty_grpc.store.folios import Folios
from loyalty_grpc.store.sale import SaleRow, SaleValues, insert_sale, original_sale

# Responses carry points as int32 (DESIGN.md §3).
MAX_PUNTOS = INT32_MAX


@dataclass(frozen=True)
class NewSale:
    id_externo: str
    fan: FanRef
    centavos: int
    moneda: str
    ts: datetime
    terminal: str | None = None
    sitio: str | None = None


@dataclass(frozen=True)
class SaleResult:
    duplicado: bool
    folio: int
    # Credited by this call (0 on a duplicate).
    puntos_otorgados: int
    # Credited by the sale when it was applied, whichever call applied it.
    puntos_acreditados: int
    saldo: int
    fan_id: str
    correo: str


def _points(caller: Caller, centavos: int) -> int:
    if not caller.earns_points:
        return 0
    puntos = points_for(centavos, caller.tasa_puntos)
    if puntos > MAX_PUNTOS:
        raise LoyaltyError(
            CodigoError.IMPORTE_INVALIDO,
            "importe: demasiado grande para los puntos de este programa",
        )
    return puntos


def _replay(engine: Database, caller: Caller, sale: NewSale, fan: SaleRow) -> SaleResult:
    """The answer to an id_externo seen before: the original folio, no points now, the
    points it credited then, today's balance; or id_externo_en_conflicto when the fan or
    the amount differ."""
    original = original_sale(engine, caller.programa_id, caller.modo.value, sale.id_externo)
    if original.fan_pk != fan.fan_pk or original.centavos != sale.centavos:
        differs = "el fan" if original.fan_pk != fan.fan_pk else "el importe"
        raise LoyaltyError(
            CodigoError.ID_EXTERNO_EN_CONFLICTO,
            f"id_externo ya registrado (folio {original.folio}) con otro valor "
            f"en {differs}; use un id_externo nuevo para otra venta",
        )
    return SaleResult(
        duplicado=True,
        folio=original.folio,
        puntos_otorgados=0,
        puntos_acreditados=original.puntos,
        saldo=original.saldo,
        fan_id=fan.fan_id,
        correo=fan.correo,
    )


def register_sale(engine: Database, folios: Folios, caller: Caller, sale: NewSale) -> SaleResult:
    """The sale, new (its folio taken from `folios`, the process's) or a duplicate's
    answer; its errors raised."""
    if ascii_upper(sale.moneda) != caller.moneda:
        raise LoyaltyError(
            CodigoError.MONEDA_NO_SOPORTADA,
            f"moneda: el programa opera en {caller.moneda}, llegó {shown(sale.moneda)}",
        )
    puntos = _points(caller, sale.centavos)
    if not sale.fan.matchable:
        raise not_found(sale.fan)
    row = insert_sale(
        engine,
        SaleValues(
            folio=folios.take(),
            programa=caller.programa_id,
            modo=caller.modo.value,
            id_externo=sale.id_externo,
            centavos=sale.centavos,
            moneda=caller.moneda,
            terminal=sale.terminal,
            sitio=sale.sitio,
            ts=sale.ts,
            puntos=puntos,
            clave_id=caller.clave_id,
        ),
        sale.fan,
    )
    if row is None:
        raise not_found(sale.fan)
    if row.folio is None:
        return _replay(engine, caller, sale, row)
    return SaleResult(
        duplicado=False,
        folio=row.folio,
        puntos_otorgados=puntos,
        puntos_acreditados=puntos,
        saldo=row.saldo,
        fan_id=row.fan_id,
        correo=row.correo,
    )
