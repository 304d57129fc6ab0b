"""Back office: fans of a program (register, update, get, baja, reactivation).

Fan ID, e-mail (case-insensitive) and QR token are each unique within a program: a use
case that writes one checks it is free first (`find_taken`, for one fan or a fixture's
batch), and store/fans.py turns the unique index's refusal of a writer that raced past
the check into the same error. The records (`FanInfo`, `FanClaim`, `Taken`) live in
store/fans.py."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from loyalty_grpc.domain.fans import (
    canonical_fan_id,
    check_qr_token,
    check_socio_desde,
    check_temporadas,
    new_fan_id,
    normalize_email,
)
from loyalty_grpc.domain.programs import program_id
from loyalty_grpc.domain.promos import EstadoFan, check_transicion_fan
from loyalty_grpc.domain.text import single_line
from loyalty_grpc.store import fans as store
from loyalty_grpc.store import lookups
from loyalty_grpc.store.fans import FanClaim, FanInfo, Taken
from loyalty_grpc.store.uow import UnitOfWork

__all__ = [
    "QR_TOKEN_BYTES",
    "FanClaim",
    "FanInfo",
    "Taken",
    "deactivate_fan",
    "find_taken",
    "get_fan",
    "reactivate_fan",
    "register_fan",
    "update_fan",
]

# Bytes of randomness in a generated QR token (16 URL-safe characters).
QR_TOKEN_BYTES = 12


def find_taken(uow: UnitOfWork, programa: str, claims: Sequence[FanClaim]) -> Taken | None:
    """The first claimed value another fan of the program holds (Fan IDs first, then
    e-mails, then QR tokens; each in `claims` order), or None. One query however many
    claims, so a fixture's thousands of fans are checked at once. Values are compared as
    the database holds them now: two claims cannot swap their values in one go."""
    return store.find_taken(uow.conn, programa, claims)


def _check_free(uow: UnitOfWork, programa: str, claim: FanClaim) -> None:
    """The duplicate error when another fan of the program holds a value of `claim`."""
    taken = find_taken(uow, programa, [claim])
    if taken is not None:
        raise store.duplicate_error(taken.indice, claim.fan_id)


def register_fan(
    uow: UnitOfWork,
    programa: str,
    fan_id: str,
    *,
    nombre: str,
    correo: str,
    socio_desde: int,
    temporadas: int = 0,
    qr_token: str = "",
) -> FanInfo:
    """A new `activo` fan with 0 points. `qr_token` empty → a random URL-safe token."""
    programa = program_id(programa, "programa")
    fid = new_fan_id(fan_id, "id")
    nombre = single_line(nombre, "nombre")
    correo = normalize_email(correo)
    socio_desde = check_socio_desde(socio_desde)
    temporadas = check_temporadas(temporadas)
    qr_token = (
        check_qr_token(qr_token) if qr_token.strip() else secrets.token_urlsafe(QR_TOKEN_BYTES)
    )
    lookups.require_program(uow.conn, programa)
    _check_free(uow, programa, FanClaim(fid, correo, qr_token, nuevo=True))
    return store.insert_fan(
        uow.conn,
        programa,
        fid,
        nombre=nombre,
        correo=correo,
        socio_desde=socio_desde,
        temporadas=temporadas,
        qr_token=qr_token,
    )


def update_fan(
    uow: UnitOfWork,
    programa: str,
    fan_id: str,
    *,
    nombre: str | None = None,
    correo: str | None = None,
    socio_desde: int | None = None,
    temporadas: int | None = None,
    qr_token: str | None = None,
) -> FanInfo:
    """Change only the fields given (None: keep). The Fan ID and the state do not change
    here (see deactivate_fan / reactivate_fan)."""
    programa = program_id(programa, "programa")
    fid = canonical_fan_id(fan_id, "id")
    new_correo = None if correo is None else normalize_email(correo)
    new_qr = None if qr_token is None else check_qr_token(qr_token)
    values: dict[str, object] = {}
    if nombre is not None:
        values["nombre"] = single_line(nombre, "nombre")
    if new_correo is not None:
        values["correo"] = new_correo
    if socio_desde is not None:
        values["socio_desde"] = check_socio_desde(socio_desde)
    if temporadas is not None:
        values["temporadas"] = check_temporadas(temporadas)
    if new_qr is not None:
        values["qr_token"] = new_qr
    current = lookups.require_fan(uow.conn, programa, fid, lock=True)
    if not values:
        return current.info
    _check_free(uow, programa, FanClaim(fid, new_correo, new_qr))
    return store.update_fan(uow.conn, current, values)


def get_fan(uow: UnitOfWork, programa: str, fan_id: str) -> FanInfo:
    """The fan, in any state."""
    programa = program_id(programa, "programa")
    fid = canonical_fan_id(fan_id, "id")
    return lookups.require_fan(uow.conn, programa, fid).info


def deactivate_fan(uow: UnitOfWork, programa: str, fan_id: str, motivo: str) -> FanInfo:
    """activo → baja, now, with the reason. A fan in baja is not found by the POS API."""
    programa = program_id(programa, "programa")
    fid = canonical_fan_id(fan_id, "id")
    motivo = single_line(motivo, "motivo")
    return _change_estado(uow, programa, fid, EstadoFan.BAJA, baja_motivo=motivo)


def reactivate_fan(uow: UnitOfWork, programa: str, fan_id: str) -> FanInfo:
    """baja → activo; the baja time and reason are cleared."""
    programa = program_id(programa, "programa")
    fid = canonical_fan_id(fan_id, "id")
    return _change_estado(uow, programa, fid, EstadoFan.ACTIVO)


def _change_estado(
    uow: UnitOfWork, programa: str, fid: str, nuevo: EstadoFan, *, baja_motivo: str | None = None
) -> FanInfo:
    current = lookups.require_fan(uow.conn, programa, fid, lock=True)
    check_transicion_fan(fid, current.estado, nuevo)
    return store.set_estado(uow.conn, programa, current.pk, nuevo, baja_motivo=baja_motivo)
