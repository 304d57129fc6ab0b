"""Back office: API keys (issue, list, revoke) and the lookup that authenticates a key.

A key's secret is shown once, when issued; the store keeps only its SHA-256 and its last
four characters. `authenticate` alone takes an `Engine`: one autocommit round trip."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Engine, Row, func, insert, select, update

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.keys import Modo, key_hash, mode_of, new_key, suffix
from loyalty_grpc.domain.permissions import parse_permisos, sorted_names
from loyalty_grpc.domain.programs import program_id
from loyalty_grpc.domain.text import single_line
from loyalty_grpc.services.backoffice.lookups import require_program
from loyalty_grpc.store.autocommit import fetch_one
from loyalty_grpc.store.tables import claves
from loyalty_grpc.store.uow import UnitOfWork


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


@dataclass(frozen=True)
class ClaveEmitida:
    info: ClaveInfo
    # The secret, returned this once.
    clave: str = field(repr=False)


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


def parse_modo(text: str, campo: str = "modo") -> Modo:
    value = text.strip().lower()
    if not value:
        raise LoyaltyError(CodigoError.CAMPO_REQUERIDO, f"{campo}: vacío")
    try:
        return Modo(value)
    except ValueError:
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA, f"{campo}: debe ser 'vivo' o 'prueba'"
        ) from None


def issue_key(
    uow: UnitOfWork, programa: str, integracion: str, modo: str, permisos: Iterable[str]
) -> ClaveEmitida:
    """A new key of the program for the integration, with those permissions; the secret
    is in the result and nowhere else."""
    conn = uow.conn
    programa = program_id(programa, "programa")
    integracion = single_line(integracion, "integracion")
    parsed_modo = parse_modo(modo)
    names = sorted_names(parse_permisos(p.strip() for p in permisos))
    clave = new_key(parsed_modo)
    require_program(uow, programa)
    row = conn.execute(
        insert(claves)
        .values(
            programa_id=programa,
            hash=key_hash(clave),
            modo=parsed_modo.value,
            integracion=integracion,
            permisos=names,
            sufijo=suffix(clave),
        )
        .returning(*_COLUMNS)
    ).one()
    return ClaveEmitida(_info(row), clave)


def list_keys(uow: UnitOfWork, programa: str) -> list[ClaveInfo]:
    """The program's keys, revoked ones included, oldest first."""
    conn = uow.conn
    programa = program_id(programa, "programa")
    require_program(uow, programa)
    rows = conn.execute(
        select(*_COLUMNS).where(claves.c.programa_id == programa).order_by(claves.c.id)
    ).all()
    return [_info(r) for r in rows]


def revoke_key(uow: UnitOfWork, clave_id: int) -> ClaveInfo:
    """Revoke the key `clave_id` from now on. Revoking it again keeps the first time."""
    conn = uow.conn
    row = conn.execute(
        update(claves)
        .where(claves.c.id == clave_id)
        .values(revocada=func.coalesce(claves.c.revocada, func.now()))
        .returning(*_COLUMNS)
    ).one_or_none()
    if row is None:
        raise LoyaltyError(CodigoError.CLAVE_NO_ENCONTRADA, f"id: no hay clave {clave_id}")
    return _info(row)


# Every few seconds per key and process (api/key_cache.py): fixed text, one autocommit
# round trip (store/autocommit.py).
_AUTHENTICATE = """
SELECT c.id, c.programa_id, p.nombre, c.integracion, c.modo, c.permisos, p.tasa_puntos,
       p.moneda
FROM claves c JOIN programas p ON p.id = c.programa_id
WHERE c.hash = %(hash)s AND c.revocada IS NULL
"""


def authenticate(engine: Engine, key: str) -> Caller | None:
    """Who `key` is: its program (and the program's rate and currency), integration, mode
    and permissions; None when the key is malformed, unknown or revoked. One indexed lookup
    by the key's hash."""
    if mode_of(key) is None:
        return None
    row = fetch_one(engine, _AUTHENTICATE, {"hash": key_hash(key)})
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
