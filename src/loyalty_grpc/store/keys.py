"""API keys: their record (never the secret), issue, list, revoke, and the lookup that
authenticates a key (by its SHA-256; the store never holds the secret itself)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, Row, func, insert, select, update

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.keys import Modo
from loyalty_grpc.domain.permissions import parse_permisos, sorted_names
from loyalty_grpc.store.autocommit import fetch_one
from loyalty_grpc.store.db import Database
from loyalty_grpc.store.tables import claves


@dataclass(frozen=True)
class ClaveInfo:
    """A key as listed: never its secret."""

    id: int
    programa: str
    integracion: str
    modo: Modo
    permisos: tuple[str, ...]
    sufijo: str
    creada: datetime
    revocada: datetime | None


_COLUMNS = (
    claves.c.id,
    claves.c.programa_id,
    claves.c.integracion,
    claves.c.modo,
    claves.c.permisos,
    claves.c.sufijo,
    claves.c.creado,
    claves.c.revocada,
)


def _info(row: Row[*tuple[Any, ...]]) -> ClaveInfo:
    return ClaveInfo(
        id=row.id,
        programa=row.programa_id,
        integracion=row.integracion,
        modo=Modo(row.modo),
        permisos=tuple(sorted_names(parse_permisos(row.permisos))),
        sufijo=row.sufijo,
        creada=row.creado,
        revocada=row.revocada,
    )


def insert_key(
    conn: Connection,
    programa: str,
    *,
    digest: bytes,
    modo: Modo,
    integracion: str,
    permisos: list[str],
    sufijo: str,
) -> ClaveInfo:
    """A new key of the program, stored by its SHA-256 (`digest`) and last characters."""
    row = conn.execute(
        insert(claves)
        .values(
            programa_id=programa,
            hash=digest,
            modo=modo.value,
            integracion=integracion,
            permisos=permisos,
            sufijo=sufijo,
        )
        .returning(*_COLUMNS)
    ).one()
    return _info(row)


def list_keys(conn: Connection, programa: str) -> list[ClaveInfo]:
    """The program's keys, revoked ones included, oldest first."""
    rows = conn.execute(
        select(*_COLUMNS).where(claves.c.programa_id == programa).order_by(claves.c.id)
    ).all()
    return [_info(r) for r in rows]


def revoke_key(conn: Connection, clave_id: int) -> ClaveInfo | None:
    """Revoke the key from now on (revoking it again keeps the first time); None when
    there is no such key."""
    # Two statements, not `SET revocada = coalesce(revocada, now())`: Citus refuses a
    # function that is not IMMUTABLE inside COALESCE or CASE (`claves` is a reference
    # table there). A revocation racing this one waits on the row, then finds it revoked.
    row = conn.execute(
        update(claves)
        .where(claves.c.id == clave_id, claves.c.revocada.is_(None))
        .values(revocada=func.now())
        .returning(*_COLUMNS)
    ).one_or_none()
    if row is None:
        row = conn.execute(select(*_COLUMNS).where(claves.c.id == clave_id)).one_or_none()
    return None if row is None else _info(row)


# Every few seconds per key and process (api/key_cache.py): fixed text, one autocommit
# round trip (store/autocommit.py).
_AUTHENTICATE = """
SELECT c.id, c.programa_id, p.nombre, c.integracion, c.modo, c.permisos, p.tasa_puntos,
       p.moneda
FROM claves c JOIN programas p ON p.id = c.programa_id
WHERE c.hash = %(hash)s AND c.revocada IS NULL
"""


def caller_of(engine: Database, digest: bytes) -> Caller | None:
    """Who the unrevoked key whose SHA-256 is `digest` is: its program (and the program's
    rate and currency), integration, mode and permissions; None when there is none. One
    indexed lookup, one autocommit round trip."""
    row = fetch_one(engine, _AUTHENTICATE, {"hash": digest})
    if row is None:
        return None
    clave_id, programa_id, nombre, integracion, modo, permisos, tasa, moneda = row
    return Caller(
        programa_id=programa_id,
        programa_nombre=nombre,
        clave_id=clave_id,
        integracion=integracion,
        modo=Modo(modo),
        permisos=parse_permisos(permisos),
        tasa_puntos=Decimal(tasa),
        moneda=str(moneda),
    )
