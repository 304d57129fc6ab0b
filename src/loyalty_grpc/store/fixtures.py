"""The fixture apply's statements (services/backoffice/fixtures.py decides what to write):
the advisory lock that serialises applies, the database's clock, the rows a fixture names
read FOR UPDATE as records (so that a sale running at the same time cannot slip between a
balance read and its adjustment), the pks of the fans its codes name, and the writes of
one entity: its new rows inserted in one statement, its changed rows updated by their key
in one executemany (a program's fans, promotions and codes by (programa_id, key), like every
statement on a program's rows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal, TypeVar

from sqlalchemy import (
    Column,
    Connection,
    Row,
    Select,
    Table,
    and_,
    any_,
    bindparam,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, BYTEA

from loyalty_grpc.store.params import text_array
from loyalty_grpc.store.tables import claves, codigos, fans, programas, promos

# Arbitrary constant identifying "a fixture apply" among PostgreSQL advisory locks.
_LOCK_KEY = 0x10_7A_17_01

# The entities a fixture writes rows of, by their table's name.
Entidad = Literal["programas", "claves", "fans", "promos", "codigos"]
_TABLES: dict[str, Table] = {t.name: t for t in (programas, claves, fans, promos, codigos)}
# Each entity's row id (what other rows refer to), and the entities whose rows belong to
# one program (found by (programa_id, row id)).
_ROW_ID: dict[str, str] = {
    "programas": "id",
    "claves": "id",
    "fans": "pk",
    "promos": "id",
    "codigos": "id",
}
_OF_PROGRAM = frozenset({"fans", "promos", "codigos"})


# --- records: the columns of a stored row the apply compares or keeps ----------------------


@dataclass(frozen=True)
class ProgramaRow:
    id: str
    nombre: str
    tasa_puntos: Decimal
    qr_url: str


@dataclass(frozen=True)
class ClaveRow:
    id: int
    programa_id: str
    integracion: str
    permisos: list[str]


@dataclass(frozen=True)
class FanRow:
    pk: int
    fan_id: str
    nombre: str
    correo: str
    socio_desde: int
    temporadas: int
    qr_token: str
    estado: str
    baja_en: datetime | None
    baja_motivo: str | None
    puntos: int


@dataclass(frozen=True)
class PromoRow:
    id: int
    nombre: str
    descripcion: str
    estado: str
    vigencia_fin: date
    puntos_canje: int


@dataclass(frozen=True)
class CodigoRow:
    id: int
    codigo: str
    estado: str
    fan_pk: int | None
    asignado_en: datetime | None
    canjeado_en: datetime | None
    canje_terminal: str | None
    liberado_en: datetime | None


StoredRow = ProgramaRow | ClaveRow | FanRow | PromoRow | CodigoRow
_R = TypeVar("_R", ProgramaRow, ClaveRow, FanRow, PromoRow, CodigoRow)


# --- the apply's frame ----------------------------------------------------------------------


def lock_applies(conn: Connection) -> None:
    """Wait for any other apply to end (a transaction-level advisory lock: held until the
    caller's transaction ends)."""
    conn.execute(select(func.pg_advisory_xact_lock(_LOCK_KEY)))


def database_now(conn: Connection) -> datetime:
    """The transaction's start time, by the database's clock."""
    now: datetime = conn.execute(select(func.now())).scalar_one()
    return now


# --- reads: the rows a fixture names, locked ------------------------------------------------


def programas_for_update(conn: Connection, ids: Iterable[str]) -> dict[str, ProgramaRow]:
    """The programs of `ids` that exist, by id, locked FOR UPDATE."""
    query = select(programas).where(programas.c.id == any_(text_array(ids))).with_for_update()
    return _records_by(conn, query, "id", ProgramaRow)


def claves_for_update(conn: Connection, hashes: Iterable[bytes]) -> dict[bytes, ClaveRow]:
    """The keys stored under `hashes`, by hash, locked FOR UPDATE."""
    query = (
        select(claves)
        .where(claves.c.hash == any_(literal(list(hashes), ARRAY(BYTEA))))
        .with_for_update()
    )
    return _records_by(conn, query, "hash", ClaveRow)


def fans_for_update(
    conn: Connection, programa_id: str, fan_ids: Iterable[str]
) -> dict[str, FanRow]:
    """The program's fans of `fan_ids` (canonical) that exist, by Fan ID, locked FOR
    UPDATE."""
    query = (
        select(fans)
        .where(fans.c.programa_id == programa_id, fans.c.fan_id == any_(text_array(fan_ids)))
        .with_for_update()
    )
    return _records_by(conn, query, "fan_id", FanRow)


def promos_for_update(
    conn: Connection, programa_id: str, lower_names: Iterable[str]
) -> dict[str, PromoRow]:
    """The program's promotions whose lower-case name is in `lower_names`, by lower-case
    name, locked FOR UPDATE."""
    nombre = func.lower(promos.c.nombre).label("nombre_min")
    query = (
        select(promos, nombre)
        .where(promos.c.programa_id == programa_id, nombre == any_(text_array(lower_names)))
        .with_for_update()
    )
    return _records_by(conn, query, "nombre_min", PromoRow)


def codigos_for_update(
    conn: Connection, programa_id: str, promo_id: int, codes: Iterable[str]
) -> dict[str, CodigoRow]:
    """The program's promotion's codes of `codes` that exist, by code, locked FOR UPDATE."""
    query = (
        select(codigos)
        .where(
            codigos.c.programa_id == programa_id,
            codigos.c.promo_id == promo_id,
            codigos.c.codigo == any_(text_array(codes)),
        )
        .with_for_update()
    )
    return _records_by(conn, query, "codigo", CodigoRow)


def fan_pks(conn: Connection, programa_id: str, fan_ids: Iterable[str]) -> dict[str, int]:
    """The pks of the program's fans of `fan_ids` that exist, by Fan ID (not locked)."""
    return {
        fan_id: int(pk)
        for fan_id, pk in conn.execute(
            select(fans.c.fan_id, fans.c.pk).where(
                fans.c.programa_id == programa_id, fans.c.fan_id == any_(text_array(fan_ids))
            )
        )
    }


# --- writes ---------------------------------------------------------------------------------


def write_rows(
    conn: Connection,
    entidad: Entidad,
    new: Sequence[Mapping[str, Any]],
    changed: Sequence[tuple[StoredRow, Mapping[str, Any]]],
    *,
    programa_id: str | None = None,
    key: str | None = None,
) -> dict[Any, int]:
    """Insert the `new` rows (column values) in one statement, then set the values of each
    `changed` (stored row, new column values) by its row id in one executemany (every one
    of them sets the same columns; a program's rows by (`programa_id`, row id): the
    program's fans, promotions and codes need it). Returns {key: row id} of the inserted
    rows when `key` (a column name) is given."""
    table = _TABLES[entidad]
    pk: Column[Any] = table.c[_ROW_ID[entidad]]
    if entidad in _OF_PROGRAM and programa_id is None:
        raise ValueError(f"the rows of {entidad} are written by program")
    created: dict[Any, int] = {}
    if new:
        if key is None:
            conn.execute(insert(table), list(new))
        else:
            created = {
                k: int(row_pk)
                for k, row_pk in conn.execute(insert(table).returning(table.c[key], pk), list(new))
            }
    if changed:
        by_id = pk == bindparam("b_pk")
        conn.execute(
            update(table).where(
                and_(table.c.programa_id == programa_id, by_id) if entidad in _OF_PROGRAM else by_id
            ),
            [{**values, "b_pk": getattr(row, pk.name)} for row, values in changed],
        )
    return created


# --- helpers --------------------------------------------------------------------------------


def _records_by(
    conn: Connection, query: Select[Any], column: str, record: type[_R]
) -> dict[Any, _R]:
    return {getattr(row, column): _record(row, record) for row in conn.execute(query)}


def _record(row: Row[Any], record: type[_R]) -> _R:
    return record(**{f.name: row._mapping[f.name] for f in fields(record)})
