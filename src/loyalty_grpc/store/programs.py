"""Loyalty programs: their record, the upsert by id and the list."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, Row, literal_column, select
from sqlalchemy.dialects.postgresql import insert

from loyalty_grpc.store.tables import programas


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
    conn: Connection,
    programa_id: str,
    nombre: str,
    tasa_puntos: Decimal,
    *,
    qr_url: str,
    moneda: str,
) -> UpsertResult:
    """Insert the program or set its other fields to these values, in one statement;
    `creado` tells which (`xmax = 0`: the row is a new one)."""
    values = {
        "id": programa_id,
        "nombre": nombre,
        "tasa_puntos": tasa_puntos,
        "qr_url": qr_url,
        "moneda": moneda,
    }
    new = insert(programas).values(values)
    stmt = new.on_conflict_do_update(
        index_elements=[programas.c.id],
        set_={k: new.excluded[k] for k in values if k != "id"},
    ).returning(*_COLUMNS, literal_column("xmax = 0").label("creado"))
    row = conn.execute(stmt).one()
    return UpsertResult(_programa(row), bool(row.creado))


def list_programs(conn: Connection) -> list[Programa]:
    """Every program, by id."""
    rows = conn.execute(select(*_COLUMNS).order_by(programas.c.id)).all()
    return [_programa(r) for r in rows]
