"""Back office: fans of a program (register, update, get, baja, reactivation).

Fan ID, e-mail (case-insensitive) and QR token are each unique within a program. A
duplicate is found by a pre-check (`find_taken`, for one fan or a fixture's batch) and,
when two writers race past the pre-check, by the unique index that refuses the second one
(translated by the index's name)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, any_, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import ColumnElement

from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.fans import (
    canonical_fan_id,
    check_qr_token,
    check_socio_desde,
    check_temporadas,
    email_key,
    new_fan_id,
    normalize_email,
)
from loyalty_grpc.domain.programs import program_id
from loyalty_grpc.domain.promos import EstadoFan, check_transicion_fan
from loyalty_grpc.domain.text import single_line
from loyalty_grpc.services.backoffice.integrity import translate
from loyalty_grpc.services.backoffice.lookups import require_fan, require_program, text_array
from loyalty_grpc.store.tables import fans
from loyalty_grpc.store.uow import UnitOfWork

# Bytes of randomness in a generated QR token (16 URL-safe characters).
QR_TOKEN_BYTES = 12


@dataclass(frozen=True)
class FanInfo:
    programa: str
    fan_id: str
    nombre: str
    correo: str
    socio_desde: int
    temporadas: int
    qr_token: str
    puntos: int
    estado: EstadoFan
    baja_en: datetime | None
    baja_motivo: str | None
    actualizado: datetime


def fan_info(row: Row[*tuple[Any, ...]]) -> FanInfo:
    return FanInfo(
        programa=row.programa_id,
        fan_id=row.fan_id,
        nombre=row.nombre,
        correo=row.correo,
        socio_desde=row.socio_desde,
        temporadas=row.temporadas,
        qr_token=row.qr_token,
        puntos=row.puntos,
        estado=EstadoFan(row.estado),
        baja_en=row.baja_en,
        baja_motivo=row.baja_motivo,
        actualizado=row.actualizado,
    )


@dataclass(frozen=True)
class FanClaim:
    """The values one fan is to hold in its program. `correo` / `qr_token` None: not
    claimed (unchanged). `nuevo`: a fan being created, so its Fan ID must be free too;
    otherwise the fan with this Fan ID (if it exists yet) is the claimant itself, and what
    it holds is no conflict."""

    fan_id: str
    correo: str | None
    qr_token: str | None
    nuevo: bool = False


@dataclass(frozen=True)
class Taken:
    """A value of `claim` that another fan of the program (Fan ID `holder`) holds."""

    claim: FanClaim
    campo: str  # "id", "correo" or "qr_token"
    indice: str  # the unique index that would refuse it
    codigo: CodigoError
    holder: str


@dataclass(frozen=True)
class _Unique:
    """A value a fan holds alone in its program, each side in its compared form."""

    campo: str
    indice: str
    codigo: CodigoError
    column: ColumnElement[Any]
    of_claim: Callable[[FanClaim], str | None]
    of_row: Callable[[Row[*tuple[Any, ...]]], str]


# In the order conflicts are reported.
_UNIQUE = (
    _Unique(
        "id",
        "uq_fans_programa_fan_id",
        CodigoError.FAN_DUPLICADO,
        fans.c.fan_id,
        lambda c: c.fan_id if c.nuevo else None,
        lambda r: str(r.fan_id),
    ),
    _Unique(
        "correo",
        "uq_fans_programa_correo",
        CodigoError.CORREO_DUPLICADO,
        func.lower(fans.c.correo.collate("C")),  # email_key's fold, as the index
        lambda c: None if c.correo is None else email_key(c.correo),
        lambda r: email_key(r.correo),
    ),
    _Unique(
        "qr_token",
        "uq_fans_programa_qr_token",
        CodigoError.QR_DUPLICADO,
        fans.c.qr_token,
        lambda c: c.qr_token,
        lambda r: str(r.qr_token),
    ),
)


def _duplicates(fan_id: str) -> dict[str, LoyaltyError]:
    """The duplicate error of each unique index, for register and update. Detalles name
    the Fan ID the caller gave, never the other fan's e-mail or token."""
    return {
        u.indice: LoyaltyError(
            u.codigo,
            f"id: el programa ya tiene el fan {shown(fan_id)}"
            if u.campo == "id"
            else f"{u.campo}: otro fan del programa ya lo usa",
        )
        for u in _UNIQUE
    }


def find_taken(uow: UnitOfWork, programa: str, claims: Sequence[FanClaim]) -> Taken | None:
    """The first claimed value another fan of the program holds (Fan IDs first, then
    e-mails, then QR tokens; each in `claims` order), or None. One query however many
    claims, so a fixture's thousands of fans are checked at once. Values are compared as
    the database holds them now: two claims cannot swap their values in one go."""
    conn = uow.conn
    matches = []
    for u in _UNIQUE:
        values = [v for c in claims if (v := u.of_claim(c)) is not None]
        if values:
            matches.append(u.column == any_(text_array(values)))
    if not matches:
        return None
    rows = conn.execute(
        select(fans.c.fan_id, fans.c.correo, fans.c.qr_token).where(
            fans.c.programa_id == programa, or_(*matches)
        )
    ).all()
    for u in _UNIQUE:
        holders = {u.of_row(r): str(r.fan_id) for r in rows}
        for claim in claims:
            value = u.of_claim(claim)
            holder = None if value is None else holders.get(value)
            if holder is not None and (claim.nuevo or holder != claim.fan_id):
                return Taken(claim, u.campo, u.indice, u.codigo, holder)
    return None


def _check_free(uow: UnitOfWork, programa: str, claim: FanClaim) -> None:
    """The duplicate error when another fan of the program holds a value of `claim`."""
    taken = find_taken(uow, programa, [claim])
    if taken is not None:
        raise _duplicates(claim.fan_id)[taken.indice]


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
    conn = uow.conn
    programa = program_id(programa, "programa")
    fid = new_fan_id(fan_id, "id")
    values = {
        "programa_id": programa,
        "fan_id": fid,
        "nombre": single_line(nombre, "nombre"),
        "correo": normalize_email(correo),
        "socio_desde": check_socio_desde(socio_desde),
        "temporadas": check_temporadas(temporadas),
        "qr_token": (
            check_qr_token(qr_token) if qr_token.strip() else secrets.token_urlsafe(QR_TOKEN_BYTES)
        ),
    }
    require_program(uow, programa)
    claim = FanClaim(fid, str(values["correo"]), str(values["qr_token"]), nuevo=True)
    _check_free(uow, programa, claim)
    try:
        row = conn.execute(insert(fans).values(values).returning(fans)).one()
    except IntegrityError as exc:
        raise translate(exc, _duplicates(fid)) from exc
    return fan_info(row)


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
    conn = uow.conn
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
    current = require_fan(uow, programa, fid, lock=True)
    if not values:
        return fan_info(current)
    _check_free(uow, programa, FanClaim(fid, new_correo, new_qr))
    try:
        row = conn.execute(
            update(fans).where(fans.c.pk == current.pk).values(values).returning(fans)
        ).one()
    except IntegrityError as exc:
        raise translate(exc, _duplicates(fid)) from exc
    return fan_info(row)


def get_fan(uow: UnitOfWork, programa: str, fan_id: str) -> FanInfo:
    """The fan, in any state."""
    programa = program_id(programa, "programa")
    fid = canonical_fan_id(fan_id, "id")
    return fan_info(require_fan(uow, programa, fid))


def deactivate_fan(uow: UnitOfWork, programa: str, fan_id: str, motivo: str) -> FanInfo:
    """activo → baja, now, with the reason. A fan in baja is not found by the POS API."""
    programa = program_id(programa, "programa")
    fid = canonical_fan_id(fan_id, "id")
    motivo = single_line(motivo, "motivo")
    return _change_estado(
        uow, programa, fid, EstadoFan.BAJA, {"baja_en": func.now(), "baja_motivo": motivo}
    )


def reactivate_fan(uow: UnitOfWork, programa: str, fan_id: str) -> FanInfo:
    """baja → activo; the baja time and reason are cleared."""
    programa = program_id(programa, "programa")
    fid = canonical_fan_id(fan_id, "id")
    return _change_estado(
        uow, programa, fid, EstadoFan.ACTIVO, {"baja_en": None, "baja_motivo": None}
    )


def _change_estado(
    uow: UnitOfWork, programa: str, fid: str, nuevo: EstadoFan, values: dict[str, object]
) -> FanInfo:
    conn = uow.conn
    current = require_fan(uow, programa, fid, lock=True)
    check_transicion_fan(fid, EstadoFan(current.estado), nuevo)
    row = conn.execute(
        update(fans)
        .where(fans.c.pk == current.pk)
        .values(estado=nuevo.value, **values)
        .returning(fans)
    ).one()
    return fan_info(row)
