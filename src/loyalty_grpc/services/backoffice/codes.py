"""Back office: delivering a code to a fan (a named code, or the promotion's next
available one) and taking a code out of circulation.

The code's row is locked for the change, so a concurrent POS redemption of the same code waits
and then sees the new state. (Deposits: services.code_deposit.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, func, select, update

from loyalty_grpc.domain.codes import normalize_code
from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.fans import canonical_fan_id
from loyalty_grpc.domain.programs import program_id
from loyalty_grpc.domain.promos import EstadoCodigo, EstadoFan, check_transicion_codigo
from loyalty_grpc.services.backoffice.lookups import require_fan, require_promo
from loyalty_grpc.store.tables import codigos, fans
from loyalty_grpc.store.uow import UnitOfWork


@dataclass(frozen=True)
class CodigoInfo:
    promo_id: int
    codigo: str
    estado: EstadoCodigo
    # Fan ID the code was delivered to; None when never delivered.
    fan: str | None


def _locked_code(
    uow: UnitOfWork, programa: str, promo_id: int, codigo: str
) -> Row[*tuple[Any, ...]]:
    conn = uow.conn
    require_promo(uow, programa, promo_id)
    row = conn.execute(
        select(codigos.c.id, codigos.c.estado)
        .where(codigos.c.promo_id == promo_id, codigos.c.codigo == codigo)
        .with_for_update()
    ).one_or_none()
    if row is None:
        raise LoyaltyError(
            CodigoError.CODIGO_NO_ENCONTRADO,
            f"codigo: la promoción {promo_id} no tiene el código {shown(codigo)}",
        )
    return row


def _info(uow: UnitOfWork, code_pk: int) -> CodigoInfo:
    conn = uow.conn
    row = conn.execute(
        select(codigos.c.promo_id, codigos.c.codigo, codigos.c.estado, fans.c.fan_id)
        .outerjoin(fans, fans.c.pk == codigos.c.fan_pk)
        .where(codigos.c.id == code_pk)
    ).one()
    return CodigoInfo(
        promo_id=row.promo_id, codigo=row.codigo, estado=EstadoCodigo(row.estado), fan=row.fan_id
    )


def assign_code(
    uow: UnitOfWork, programa: str, promo_id: int, codigo: str, fan_id: str
) -> CodigoInfo:
    """disponible → asignado to an `activo` fan, now."""
    conn = uow.conn
    programa = program_id(programa, "programa")
    codigo = normalize_code(codigo)
    fid = canonical_fan_id(fan_id, "fan")
    code = _locked_code(uow, programa, promo_id, codigo)
    fan = require_fan(uow, programa, fid, lock=True)
    if fan.estado != EstadoFan.ACTIVO:
        raise LoyaltyError(CodigoError.FAN_NO_ENCONTRADO, f"fan: {shown(fid)} está de baja")
    check_transicion_codigo(codigo, EstadoCodigo(code.estado), EstadoCodigo.ASIGNADO)
    conn.execute(
        update(codigos)
        .where(codigos.c.id == code.id)
        .values(estado=EstadoCodigo.ASIGNADO.value, fan_pk=fan.pk, asignado_en=func.now())
    )
    return _info(uow, code.id)


def release_code(uow: UnitOfWork, programa: str, promo_id: int, codigo: str) -> CodigoInfo:
    """disponible or asignado → liberado, now. A delivered code keeps its fan."""
    conn = uow.conn
    programa = program_id(programa, "programa")
    codigo = normalize_code(codigo)
    code = _locked_code(uow, programa, promo_id, codigo)
    check_transicion_codigo(codigo, EstadoCodigo(code.estado), EstadoCodigo.LIBERADO)
    conn.execute(
        update(codigos)
        .where(codigos.c.id == code.id)
        .values(estado=EstadoCodigo.LIBERADO.value, liberado_en=func.now())
    )
    return _info(uow, code.id)


def assign_next_code(uow: UnitOfWork, programa: str, promo_id: int, fan_id: str) -> CodigoInfo:
    """The promotion's oldest `disponible` code (lowest id: deposit order) → asignado to an
    `activo` fan, now. Race-free: the code is picked FOR UPDATE SKIP LOCKED, so concurrent
    calls each get a different code and never wait for one another. None left →
    codigo_no_encontrado (the code asked for, the next available one, does not exist)."""
    conn = uow.conn
    programa = program_id(programa, "programa")
    fid = canonical_fan_id(fan_id, "fan")
    require_promo(uow, programa, promo_id)
    fan = require_fan(uow, programa, fid, lock=True)
    if fan.estado != EstadoFan.ACTIVO:
        raise LoyaltyError(CodigoError.FAN_NO_ENCONTRADO, f"fan: {shown(fid)} está de baja")
    code_pk = conn.execute(
        select(codigos.c.id)
        .where(codigos.c.promo_id == promo_id, codigos.c.estado == EstadoCodigo.DISPONIBLE.value)
        .order_by(codigos.c.id)
        .limit(1)
        .with_for_update(skip_locked=True)
    ).scalar_one_or_none()
    if code_pk is None:
        raise LoyaltyError(
            CodigoError.CODIGO_NO_ENCONTRADO,
            f"promo_id: la promoción {promo_id} no tiene códigos "
            "disponibles (deposite más con `admin codes import`)",
        )
    conn.execute(
        update(codigos)
        .where(codigos.c.id == code_pk)
        .values(estado=EstadoCodigo.ASIGNADO.value, fan_pk=fan.pk, asignado_en=func.now())
    )
    return _info(uow, code_pk)
