"""`promos`: a program's promotions with their coupon inventory (counts by code state),
each with whether it still takes codes. One statement however many promotions and codes
(store/promos.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from loyalty_grpc.domain.codes import admite_codigos
from loyalty_grpc.domain.promos import EstadoPromo
from loyalty_grpc.store import promos as promos_store
from loyalty_grpc.store.db import Database
from loyalty_grpc.store.promos import Inventario
from loyalty_grpc.store.uow import UnitOfWork

__all__ = ["Inventario", "ListedPromo", "list_promos"]


@dataclass(frozen=True)
class ListedPromo:
    id: int
    nombre: str
    estado: EstadoPromo
    vigencia_fin: date
    admite_codigos: bool
    inventario: Inventario


def list_promos(engine: Database, programa: str) -> list[ListedPromo]:
    """Every promotion of the program, by id, with its inventory."""
    with UnitOfWork(engine) as uow:
        listed = promos_store.list_promos(uow.conn, programa)
    return [
        ListedPromo(
            id=p.id,
            nombre=p.nombre,
            estado=p.estado,
            vigencia_fin=p.vigencia_fin,
            admite_codigos=admite_codigos(p.estado),
            inventario=p.inventario,
        )
        for p in listed
    ]
