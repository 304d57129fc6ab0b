"""`codes`: deposit coupon codes into a promotion's inventory — one use case for POST
/api/v1/codes and the back office's ImportCodes (`loyalty admin codes import`).

Idempotent per (promotion, code): one set-based statement, ``INSERT … SELECT unnest(:codes)
ORDER BY codigo ON CONFLICT (promo_id, codigo) DO NOTHING``, so resending a batch adds
nothing and concurrent overlapping deposits count each code once (a conflicting insert
waits for the other transaction and then counts the code as a duplicate). Inserting in
code order means two concurrent deposits take their row locks in the same order and
cannot deadlock. The promotion's row is held FOR SHARE meanwhile, so it cannot end
(`terminada`) halfway through a deposit. Deposited codes start `disponible`.

The batch is validated whole before this runs (domain.codes.code_batch): a call with an
invalid code changes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, Integer, Row, Text, func, literal, select
from sqlalchemy.dialects.postgresql import ARRAY, insert

from loyalty_grpc.domain.codes import CodeBatch, PromoRef, check_admite_codigos
from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.programs import program_id
from loyalty_grpc.domain.promos import EstadoCodigo, EstadoPromo
from loyalty_grpc.services.backoffice.lookups import require_program
from loyalty_grpc.store.promos import Inventario, promo_inventory
from loyalty_grpc.store.tables import codigos, promos
from loyalty_grpc.store.uow import UnitOfWork


@dataclass(frozen=True)
class PromoResumen:
    id: int
    nombre: str
    estado: EstadoPromo


@dataclass(frozen=True)
class DepositResult:
    promo: PromoResumen
    # Unique codes in the call = agregados + duplicados.
    recibidos: int
    agregados: int
    duplicados: int
    # After the call, as its own transaction saw it.
    inventario: Inventario


def _find_promo(uow: UnitOfWork, programa: str, ref: PromoRef, campo: str) -> Row[*tuple[Any, ...]]:
    """The promotion's row, held FOR SHARE until the end of the transaction; by id first,
    then by name (case-insensitive, as the unique index uq_promos_programa_nombre)."""
    conn = uow.conn
    base = (
        select(promos.c.id, promos.c.nombre, promos.c.estado)
        .where(promos.c.programa_id == programa)
        .with_for_update(read=True)
    )
    row = None
    if ref.id is not None:
        row = conn.execute(base.where(promos.c.id == ref.id)).one_or_none()
    if row is None and ref.nombre is not None:
        row = conn.execute(
            base.where(func.lower(promos.c.nombre) == func.lower(literal(ref.nombre, Text)))
        ).one_or_none()
    if row is None:
        require_program(uow, programa)  # programa_no_encontrado first (back office)
        named = shown(ref.nombre) if ref.nombre is not None else str(ref.id)
        raise LoyaltyError(
            CodigoError.PROMO_NO_ENCONTRADA, f"{campo}: el programa no tiene la promoción {named}"
        )
    return row


def _insert_new(uow: UnitOfWork, programa: str, promo_id: int, batch: CodeBatch) -> int:
    """Insert the codes the promotion lacks; how many went in. One statement."""
    conn = uow.conn
    given = (
        func.unnest(literal(list(batch.codigos), ARRAY(Text)))
        .table_valued("codigo")
        .render_derived(name="given")
    )
    rows = (
        select(
            literal(promo_id, Integer),
            literal(programa, Text),
            given.c.codigo,
            literal(EstadoCodigo.DISPONIBLE.value, Text),
        )
        .select_from(given)
        .order_by(given.c.codigo)
    )
    inserted = (
        insert(codigos)
        .from_select(["promo_id", "programa_id", "codigo", "estado"], rows)
        .on_conflict_do_nothing(index_elements=["promo_id", "codigo"])
        .returning(codigos.c.id)
        .cte("inserted")
    )
    return int(conn.execute(select(func.count()).select_from(inserted)).scalar_one())


def deposit_codes(
    engine: Engine, programa: str, ref: PromoRef, batch: CodeBatch, *, campo: str = "promo"
) -> DepositResult:
    """Add `batch` to the program's promotion `ref` (sent in the field `campo`):
    promo_no_encontrada, or promo_no_admite_codigos when it has ended; else the counts and
    the inventory after."""
    programa = program_id(programa, "programa")
    with UnitOfWork(engine) as uow:
        row = _find_promo(uow, programa, ref, campo)
        promo = PromoResumen(id=row.id, nombre=row.nombre, estado=EstadoPromo(row.estado))
        check_admite_codigos(promo.nombre, promo.estado)
        agregados = _insert_new(uow, programa, promo.id, batch)
        inventario = promo_inventory(uow.conn, promo.id)
        uow.commit()
    recibidos = len(batch.codigos)
    return DepositResult(
        promo=promo,
        recibidos=recibidos,
        agregados=agregados,
        duplicados=recibidos - agregados,
        inventario=inventario,
    )
