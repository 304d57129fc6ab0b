"""Back office: loyalty programs (upsert by id, list)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import Row, literal_column, select
from sqlalchemy.dialects.postgresql import insert

from loyalty_grpc.domain import programs as rules
from loyalty_grpc.domain.text import single_line
from loyalty_grpc.store.tables import programas
from loyalty_grpc.store.uow import UnitOfWork


@dataclass(frozen=True)
class Programa:
    id: str
    nombre: str
    tasa_puntos: Decimal
    qr_url: str
    moneda: str


@dataclass(frozen=True)
class UpsertResult:
    programa: Programa
    creado: bool


_COLUMNS = (
    programas.c.id,
    programas.c.nombre,
    programas.c.tasa_puntos,
    programas.c.qr_url,
    programas.c.moneda,
)


def _programa(row: Row[*tuple[Any, ...]]) -> Programa:
    return Programa(
        id=row.id,
        nombre=row.nombre,
        tasa_puntos=row.tasa_puntos,
        qr_url=row.qr_url,
        moneda=row.moneda,
    )


def upsert_program(
    uow: UnitOfWork,
    programa_id: str,
    nombre: str,
    tasa_puntos: str,
    *,
    qr_url: str = "",
    moneda: str = "",
) -> UpsertResult:
    """Create the program `programa_id` or set its fields to these values (`moneda` empty:
    MXN). `creado` tells which."""
    conn = uow.conn
    values = {
        "id": rules.program_id(programa_id),
        "nombre": single_line(nombre, "nombre"),
        "tasa_puntos": rules.parse_tasa(tasa_puntos),
        "qr_url": rules.check_qr_url(qr_url),
        "moneda": rules.check_moneda(moneda),
    }
    new = insert(programas).values(values)
    stmt = new.on_conflict_do_update(
        index_elements=[programas.c.id],
        set_={k: new.excluded[k] for k in values if k != "id"},
    ).returning(*_COLUMNS, literal_column("xmax = 0").label("creado"))
    row = conn.execute(stmt).one()
    return UpsertResult(_programa(row), bool(row.creado))


def list_programs(uow: UnitOfWork) -> list[Programa]:
    """Every program, by id."""
    conn = uow.conn
    rows = conn.execute(select(*_COLUMNS).order_by(programas.c.id)).all()
    return [_programa(r) for r in rows]
