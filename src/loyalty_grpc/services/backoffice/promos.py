"""Back office: promotions of a program (create, update). A promotion's name is unique
within its program, case-insensitively."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from sqlalchemy import Row, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.programs import program_id
from loyalty_grpc.domain.promos import (
    EstadoPromo,
    check_puntos_canje,
    check_transicion_promo,
    parse_estado_promo,
    parse_fecha,
    promo_name,
)
from loyalty_grpc.domain.text import multi_line
from loyalty_grpc.services.backoffice.integrity import translate
from loyalty_grpc.services.backoffice.lookups import require_program, require_promo
from loyalty_grpc.store.tables import promos
from loyalty_grpc.store.uow import UnitOfWork


@dataclass(frozen=True)
class PromoInfo:
    programa: str
    id: int
    nombre: str
    descripcion: str
    estado: EstadoPromo
    vigencia_fin: date
    puntos_canje: int


def _info(row: Row[*tuple[Any, ...]]) -> PromoInfo:
    return PromoInfo(
        programa=row.programa_id,
        id=row.id,
        nombre=row.nombre,
        descripcion=row.descripcion,
        estado=EstadoPromo(row.estado),
        vigencia_fin=row.vigencia_fin,
        puntos_canje=row.puntos_canje,
    )


def _duplicada(nombre: str) -> LoyaltyError:
    return LoyaltyError(
        CodigoError.PROMO_DUPLICADA, f"nombre: el programa ya tiene una promoción {shown(nombre)}"
    )


def _check_name_free(uow: UnitOfWork, programa: str, nombre: str) -> None:
    conn = uow.conn
    taken = conn.execute(
        select(promos.c.id).where(
            promos.c.programa_id == programa, func.lower(promos.c.nombre) == nombre.lower()
        )
    ).first()
    if taken is not None:
        raise _duplicada(nombre)


def create_promo(
    uow: UnitOfWork,
    programa: str,
    nombre: str,
    *,
    vigencia_fin: str,
    descripcion: str = "",
    estado: str = "",
    puntos_canje: int = 0,
) -> PromoInfo:
    """A new promotion (`estado` empty → activa; `vigencia_fin` YYYY-MM-DD)."""
    conn = uow.conn
    programa = program_id(programa, "programa")
    nombre = promo_name(nombre, "nombre")
    values = {
        "programa_id": programa,
        "nombre": nombre,
        "descripcion": multi_line(descripcion, "descripcion"),
        "estado": (parse_estado_promo(estado) if estado.strip() else EstadoPromo.ACTIVA).value,
        "vigencia_fin": parse_fecha(vigencia_fin),
        "puntos_canje": check_puntos_canje(puntos_canje),
    }
    require_program(uow, programa)
    _check_name_free(uow, programa, nombre)
    try:
        row = conn.execute(insert(promos).values(values).returning(promos)).one()
    except IntegrityError as exc:
        raise translate(exc, {"uq_promos_programa_nombre": _duplicada(nombre)}) from exc
    return _info(row)


def update_promo(
    uow: UnitOfWork,
    programa: str,
    promo_id: int,
    *,
    estado: str | None = None,
    vigencia_fin: str | None = None,
    puntos_canje: int | None = None,
    descripcion: str | None = None,
) -> PromoInfo:
    """Change only the fields given (None: keep). `terminada` is final."""
    conn = uow.conn
    programa = program_id(programa, "programa")
    values: dict[str, object] = {}
    nuevo = None if estado is None else parse_estado_promo(estado)
    if nuevo is not None:
        values["estado"] = nuevo.value
    if vigencia_fin is not None:
        values["vigencia_fin"] = parse_fecha(vigencia_fin)
    if puntos_canje is not None:
        values["puntos_canje"] = check_puntos_canje(puntos_canje)
    if descripcion is not None:
        values["descripcion"] = multi_line(descripcion, "descripcion")
    current = require_promo(uow, programa, promo_id, lock=True)
    if nuevo is not None:
        check_transicion_promo(current.nombre, EstadoPromo(current.estado), nuevo)
    if not values:
        return _info(current)
    row = conn.execute(
        update(promos).where(promos.c.id == current.id).values(values).returning(promos)
    ).one()
    return _info(row)
