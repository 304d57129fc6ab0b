"""Back office: API keys (issue, list, revoke) and the lookup that authenticates a key.

A key's secret is shown once, when issued; the store keeps only its SHA-256 and its last
four characters (store/keys.py, where `ClaveInfo` lives). `authenticate` alone takes the
`Database` (the engine): one autocommit round trip."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.keys import Modo, key_hash, mode_of, new_key, suffix
from loyalty_grpc.domain.permissions import parse_permisos, sorted_names
from loyalty_grpc.domain.programs import program_id
from loyalty_grpc.domain.text import single_line
from loyalty_grpc.store import keys as store
from loyalty_grpc.store import lookups
from loyalty_grpc.store.db import Database
from loyalty_grpc.store.keys import ClaveInfo
from loyalty_grpc.store.uow import UnitOfWork

__all__ = [
    "ClaveInfo",
    "IssuedClave",
    "authenticate",
    "issue_key",
    "list_keys",
    "parse_modo",
    "revoke_key",
]


@dataclass(frozen=True)
class IssuedClave:
    info: ClaveInfo
    # The secret, returned this once.
    clave: str = field(repr=False)


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
) -> IssuedClave:
    """A new key of the program for the integration, with those permissions; the secret
    is in the result and nowhere else."""
    programa = program_id(programa, "programa")
    integracion = single_line(integracion, "integracion")
    parsed_modo = parse_modo(modo)
    names = sorted_names(parse_permisos(p.strip() for p in permisos))
    clave = new_key(parsed_modo)
    lookups.require_program(uow.conn, programa)
    info = store.insert_key(
        uow.conn,
        programa,
        digest=key_hash(clave),
        modo=parsed_modo,
        integracion=integracion,
        permisos=names,
        sufijo=suffix(clave),
    )
    return IssuedClave(info, clave)


def list_keys(uow: UnitOfWork, programa: str) -> list[ClaveInfo]:
    """The program's keys, revoked ones included, oldest first."""
    programa = program_id(programa, "programa")
    lookups.require_program(uow.conn, programa)
    return store.list_keys(uow.conn, programa)


def revoke_key(uow: UnitOfWork, clave_id: int) -> ClaveInfo:
    """Revoke the key `clave_id` from now on. Revoking it again keeps the first time."""
    info = store.revoke_key(uow.conn, clave_id)
    if info is None:
        raise LoyaltyError(CodigoError.CLAVE_NO_ENCONTRADA, f"id: no hay clave {clave_id}")
    return info


def authenticate(engine: Database, key: str) -> Caller | None:
    """Who `key` is: its program (and the program's rate and currency), integration, mode
    and permissions; None when the key is malformed, unknown or revoked. One indexed lookup
    by the key's hash."""
    if mode_of(key) is None:
        return None
    return store.caller_of(engine, key_hash(key))
