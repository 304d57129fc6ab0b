"""Fans of a program: the records the back office reads and writes, and their statements
(insert, update, state change, the uniqueness pre-check).

Fan ID, e-mail (case-insensitive) and QR token are each unique within a program. A
duplicate is found by a pre-check (`find_taken`, for one fan or a fixture's batch) and,
when two writers race past the pre-check, by the unique index that refuses the second one
(translated by the index's name into the same error, `duplicate_error`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, any_, func, insert, or_, select, update
from sqlalchemy.sql.elements import ColumnElement

from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.fans import email_key
from loyalty_grpc.domain.promos import EstadoFan
from loyalty_grpc.store.integrity import translated
from loyalty_grpc.store.params import text_array
from loyalty_grpc.store.tables import fans


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


@dataclass(frozen=True)
class FanRow:
    """A fan as its row holds it: the internal key (`pk`, what other rows refer to) and
    what the back office shows of it."""

    pk: int
    info: FanInfo

    @property
    def estado(self) -> EstadoFan:
        return self.info.estado

    @property
    def puntos(self) -> int:
        return self.info.puntos


def fan_info(row: Row[*tuple[Any, ...]]) -> FanInfo:
    """A row of `fans` (every column) as the back office shows it."""
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


def fan_row(row: Row[*tuple[Any, ...]]) -> FanRow:
    """A row of `fans` (every column) with its key."""
    return FanRow(pk=row.pk, info=fan_info(row))


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


def duplicate_error(indice: str, fan_id: str) -> LoyaltyError:
    """The duplicate error of the unique index `indice` (a `Taken.indice` of the pre-check,
    or the index that refused a write), for register and update. Detalles name the Fan ID
    the caller gave, never the other fan's e-mail or token."""
    return _duplicates(fan_id)[indice]


def _duplicates(fan_id: str) -> dict[str, LoyaltyError]:
    return {
        u.indice: LoyaltyError(
            u.codigo,
            f"id: el programa ya tiene el fan {shown(fan_id)}"
            if u.campo == "id"
            else f"{u.campo}: otro fan del programa ya lo usa",
        )
        for u in _UNIQUE
    }


def find_taken(conn: Connection, programa: str, claims: Sequence[FanClaim]) -> Taken | None:
    """The first claimed value another fan of the program holds (Fan IDs first, then
    e-mails, then QR tokens; each in `claims` order), or None. One query however many
    claims, so a fixture's thousands of fans are checked at once. Values are compared as
    the database holds them now: two claims cannot swap their values in one go."""
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


def insert_fan(
    conn: Connection,
    programa: str,
    fan_id: str,
    *,
    nombre: str,
    correo: str,
    socio_desde: int,
    temporadas: int,
    qr_token: str,
) -> FanInfo:
    """A new fan with the row's defaults (`activo`, 0 points); a value another fan took
    since the pre-check is its duplicate error."""
    values = {
        "programa_id": programa,
        "fan_id": fan_id,
        "nombre": nombre,
        "correo": correo,
        "socio_desde": socio_desde,
        "temporadas": temporadas,
        "qr_token": qr_token,
    }
    with translated(_duplicates(fan_id)):
        row = conn.execute(insert(fans).values(values).returning(fans)).one()
    return fan_info(row)


def update_fan(conn: Connection, fan: FanRow, values: Mapping[str, object]) -> FanInfo:
    """Set these columns of the fan's row (nombre, correo, socio_desde, temporadas,
    qr_token); a value another fan took since the pre-check is its duplicate error."""
    with translated(_duplicates(fan.info.fan_id)):
        row = conn.execute(
            update(fans)
            .where(fans.c.programa_id == fan.info.programa, fans.c.pk == fan.pk)
            .values(dict(values))
            .returning(fans)
        ).one()
    return fan_info(row)


def set_estado(
    conn: Connection,
    programa: str,
    fan_pk: int,
    nuevo: EstadoFan,
    *,
    baja_motivo: str | None = None,
) -> FanInfo:
    """Put the program's fan in `nuevo`: `baja` now, with its reason; `activo` with the baja
    time and reason cleared."""
    baja: dict[str, object] = (
        {"baja_en": func.now(), "baja_motivo": baja_motivo}
        if nuevo is EstadoFan.BAJA
        else {"baja_en": None, "baja_motivo": None}
    )
    row = conn.execute(
        update(fans)
        .where(fans.c.programa_id == programa, fans.c.pk == fan_pk)
        .values(estado=nuevo.value, **baja)
        .returning(fans)
    ).one()
    return fan_info(row)
