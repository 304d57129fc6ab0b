"""`promos`: a program's promotions with their coupon inventory (counts by code state).

One statement however many promotions and codes: each count is a correlated
`count(*)` per (promotion, state), which PostgreSQL answers with an index-only scan of
ix_codigos_promo_estado (promo_id, estado). The cost grows with the program's codes
(~0.1 µs each once autovacuum has set the visibility map): a promotion with a million
codes lists in ~0.1 s (bench/promos.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from sqlalchemy import Engine, Label, Select, func, select

from loyalty_grpc.domain.codes import admite_codigos
from loyalty_grpc.domain.promos import EstadoCodigo, EstadoPromo
from loyalty_grpc.store.tables import codigos, promos
from loyalty_grpc.store.uow import UnitOfWork


@dataclass(frozen=True)
class Inventario:
    disponibles: int
    asignados: int
    canjeados: int
    liberados: int


@dataclass(frozen=True)
class PromoListada:
    id: int
    nombre: str
    estado: EstadoPromo
    vigencia_fin: date
    admite_codigos: bool
    inventario: Inventario


# Inventory field → the code state it counts.
_COUNTED = {
    "disponibles": EstadoCodigo.DISPONIBLE,
    "asignados": EstadoCodigo.ASIGNADO,
    "canjeados": EstadoCodigo.CANJEADO,
    "liberados": EstadoCodigo.LIBERADO,
}


def _counts(promo_id: object) -> list[Label[int]]:
    """The inventory fields of `promo_id` (a value, or a column of the enclosing query):
    one scalar count per state, each an index-only scan of ix_codigos_promo_estado bounded
    by both of its columns. Measured at a million codes, this is ~35 % faster than one
    pass with `count(*) FILTER (WHERE estado = …)` ×4, which compares every entry's state
    four times (bench/promos.py)."""
    return [
        select(func.count())
        .select_from(codigos)
        .where(codigos.c.promo_id == promo_id, codigos.c.estado == estado.value)
        .scalar_subquery()
        .label(name)
        for name, estado in _COUNTED.items()
    ]


def _inventario(row: object) -> Inventario:
    return Inventario(**{name: int(getattr(row, name)) for name in _COUNTED})


def promo_inventory(uow: UnitOfWork, promo_id: int) -> Inventario:
    """The inventory of one promotion, as this transaction sees it."""
    conn = uow.conn
    return _inventario(conn.execute(select(*_counts(promo_id))).one())


def listing_query(programa: str) -> Select[*tuple[Any, ...]]:
    """The one statement of `list_promos` (bench/promos.py times it alone)."""
    return (
        select(
            promos.c.id,
            promos.c.nombre,
            promos.c.estado,
            promos.c.vigencia_fin,
            *_counts(promos.c.id),
        )
        .where(promos.c.programa_id == programa)
        .order_by(promos.c.id)
    )


def list_promos(engine: Engine, programa: str) -> list[PromoListada]:
    """Every promotion of the program, by id, with its inventory."""
    with UnitOfWork(engine) as uow:
        rows = uow.conn.execute(listing_query(programa)).all()
    result = []
    for row in rows:
        estado = EstadoPromo(row.estado)
        result.append(
            PromoListada(
                id=row.id,
                nombre=row.nombre,
                estado=estado,
                vigencia_fin=row.vigencia_fin,
                admite_codigos=admite_codigos(estado),
                inventario=_inventario(row),
            )
        )
    return result
