"""`codes`: deposit coupon codes into a promotion's inventory — one use case for POST
/api/v1/codes and the back office's ImportCodes (`loyalty admin codes import`).

Idempotent per (promotion, code), with concurrent overlapping deposits counting each code
once and never deadlocking (store/codes.py: one set-based INSERT in code order). The
promotion's row is held FOR SHARE meanwhile, so it cannot end (`terminada`) halfway through
a deposit. Deposited codes start `disponible`.

The batch is validated whole before this runs (domain.codes.code_batch): a call with an
invalid code changes nothing."""

from __future__ import annotations

from dataclasses import dataclass

from loyalty_grpc.domain.codes import CodeBatch, PromoRef, check_admite_codigos
from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.programs import program_id
from loyalty_grpc.store import codes as codes_store
from loyalty_grpc.store import lookups
from loyalty_grpc.store.codes import PromoResumen
from loyalty_grpc.store.db import Database
from loyalty_grpc.store.promos import Inventario, promo_inventory
from loyalty_grpc.store.uow import UnitOfWork


@dataclass(frozen=True)
class DepositResult:
    promo: PromoResumen
    # Unique codes in the call = agregados + duplicados.
    recibidos: int
    agregados: int
    duplicados: int
    # After the call, as its own transaction saw it.
    inventario: Inventario


def _find_promo(uow: UnitOfWork, programa: str, ref: PromoRef, campo: str) -> PromoResumen:
    """The promotion, held FOR SHARE until the end of the transaction; by id first, then by
    name (case-insensitive)."""
    promo = None
    if ref.id is not None:
        promo = codes_store.promo_by_id_for_share(uow.conn, programa, ref.id)
    if promo is None and ref.nombre is not None:
        promo = codes_store.promo_by_name_for_share(uow.conn, programa, ref.nombre)
    if promo is None:
        lookups.require_program(uow.conn, programa)  # programa_no_encontrado first (back office)
        named = shown(ref.nombre) if ref.nombre is not None else str(ref.id)
        raise LoyaltyError(
            CodigoError.PROMO_NO_ENCONTRADA, f"{campo}: el programa no tiene la promoción {named}"
        )
    return promo


def deposit_codes(
    engine: Database, programa: str, ref: PromoRef, batch: CodeBatch, *, campo: str = "promo"
) -> DepositResult:
    """Add `batch` to the program's promotion `ref` (sent in the field `campo`):
    promo_no_encontrada, or promo_no_admite_codigos when it has ended; else the counts and
    the inventory after."""
    programa = program_id(programa, "programa")
    with UnitOfWork(engine) as uow:
        promo = _find_promo(uow, programa, ref, campo)
        check_admite_codigos(promo.nombre, promo.estado)
        agregados = codes_store.insert_new_codes(uow.conn, programa, promo.id, batch.codigos)
        inventario = promo_inventory(uow.conn, programa, promo.id)
        uow.commit()
    recibidos = len(batch.codigos)
    return DepositResult(
        promo=promo,
        recibidos=recibidos,
        agregados=agregados,
        duplicados=recibidos - agregados,
        inventario=inventario,
    )
