"""Back office: fans of a program (register, update, get, baja, reactivation).

Fan ID, e-mail (case-insensitive) and QR token are each unique within a program. A
duplicate is found by a pre-check and, when two writers race past the pre-check, by the
unique index that refuses the second one (translated by the index's name)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, Row, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from loyalty_grpc.domain.errors import Codigo, LoyaltyError
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
from loyalty_grpc.services.backoffice.lookups import require_fan, require_program
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


def _duplicates(fan_id: str) -> dict[str, LoyaltyError]:
    # Detalles name the Fan ID the caller gave, never the other fan's e-mail or token.
    return {
        "uq_fans_programa_fan_id": LoyaltyError(
            Codigo.FAN_DUPLICADO, f"id: el programa ya tiene el fan {fan_id}"
        ),
        "uq_fans_programa_correo": LoyaltyError(
            Codigo.CORREO_DUPLICADO, "correo: otro fan del programa ya lo usa"
        ),
        "uq_fans_programa_qr_token": LoyaltyError(
            Codigo.QR_DUPLICADO, "qr_token: otro fan del programa ya lo usa"
        ),
    }


def _check_free(
    conn: Connection,
    programa: str,
    fan_id: str,
    *,
    correo: str | None,
    qr_token: str | None,
    self_pk: int | None = None,
) -> None:
    """Raise the duplicate error when another fan of the program (not `self_pk`) holds
    this Fan ID (new fans only: `self_pk` None), this e-mail or this QR token."""
    taken = []
    if self_pk is None:
        taken.append(fans.c.fan_id == fan_id)
    if correo is not None:
        taken.append(func.lower(fans.c.correo) == email_key(correo))
    if qr_token is not None:
        taken.append(fans.c.qr_token == qr_token)
    if not taken:
        return
    query = select(fans.c.pk, fans.c.fan_id, fans.c.correo, fans.c.qr_token).where(
        fans.c.programa_id == programa, or_(*taken)
    )
    if self_pk is not None:
        query = query.where(fans.c.pk != self_pk)
    errors = _duplicates(fan_id)
    rows = conn.execute(query).all()
    if self_pk is None and any(r.fan_id == fan_id for r in rows):
        raise errors["uq_fans_programa_fan_id"]
    if correo is not None and any(email_key(r.correo) == email_key(correo) for r in rows):
        raise errors["uq_fans_programa_correo"]
    if qr_token is not None and any(r.qr_token == qr_token for r in rows):
        raise errors["uq_fans_programa_qr_token"]


def register_fan(
    engine: Engine,
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
    with UnitOfWork(engine) as uow:
        require_program(uow.conn, programa)
        _check_free(
            uow.conn, programa, fid, correo=str(values["correo"]), qr_token=str(values["qr_token"])
        )
        try:
            row = uow.conn.execute(insert(fans).values(values).returning(fans)).one()
        except IntegrityError as exc:
            raise translate(exc, _duplicates(fid)) from exc
        uow.commit()
    return fan_info(row)


def update_fan(
    engine: Engine,
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
    with UnitOfWork(engine) as uow:
        current = require_fan(uow.conn, programa, fid, lock=True)
        if not values:
            return fan_info(current)
        _check_free(uow.conn, programa, fid, correo=new_correo, qr_token=new_qr, self_pk=current.pk)
        try:
            row = uow.conn.execute(
                update(fans).where(fans.c.pk == current.pk).values(values).returning(fans)
            ).one()
        except IntegrityError as exc:
            raise translate(exc, _duplicates(fid)) from exc
        uow.commit()
    return fan_info(row)


def get_fan(engine: Engine, programa: str, fan_id: str) -> FanInfo:
    """The fan, in any state."""
    programa = program_id(programa, "programa")
    fid = canonical_fan_id(fan_id, "id")
    with UnitOfWork(engine) as uow:
        return fan_info(require_fan(uow.conn, programa, fid))


def deactivate_fan(engine: Engine, programa: str, fan_id: str, motivo: str) -> FanInfo:
    """activo → baja, now, with the reason. A fan in baja is not found by the POS API."""
    programa = program_id(programa, "programa")
    fid = canonical_fan_id(fan_id, "id")
    motivo = single_line(motivo, "motivo")
    return _change_estado(
        engine, programa, fid, EstadoFan.BAJA, {"baja_en": func.now(), "baja_motivo": motivo}
    )


def reactivate_fan(engine: Engine, programa: str, fan_id: str) -> FanInfo:
    """baja → activo; the baja time and reason are cleared."""
    programa = program_id(programa, "programa")
    fid = canonical_fan_id(fan_id, "id")
    return _change_estado(
        engine, programa, fid, EstadoFan.ACTIVO, {"baja_en": None, "baja_motivo": None}
    )


def _change_estado(
    engine: Engine, programa: str, fid: str, nuevo: EstadoFan, values: dict[str, object]
) -> FanInfo:
    with UnitOfWork(engine) as uow:
        current = require_fan(uow.conn, programa, fid, lock=True)
        check_transicion_fan(fid, EstadoFan(current.estado), nuevo)
        row = uow.conn.execute(
            update(fans)
            .where(fans.c.pk == current.pk)
            .values(estado=nuevo.value, **values)
            .returning(fans)
        ).one()
        uow.commit()
    return fan_info(row)
