"""Back office: delivering a code to a fan (a named code, or the promotion's next
available one) and taking a code out of circulation.

The code's row is locked for the change, so a concurrent POS redemption of the same code waits
and then sees the new state (store/codes.py). (Deposits: services/pos/codes.py.)"""

from __future__ import annotations

from loyalty_grpc.domain.codes import normalize_code
from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.fans import canonical_fan_id
from loyalty_grpc.domain.programs import program_id
from loyalty_grpc.domain.promos import EstadoCodigo, EstadoFan, check_transicion_codigo
from loyalty_grpc.store import codes as codes_store
from loyalty_grpc.store import lookups
from loyalty_grpc.store.codes import CodigoInfo, LockedCode
from loyalty_grpc.store.uow import UnitOfWork

__all__ = ["CodigoInfo", "assign_code", "assign_next_code", "release_code"]


def _locked_code(uow: UnitOfWork, programa: str, promo_id: int, codigo: str) -> LockedCode:
    lookups.require_promo(uow.conn, programa, promo_id)
    code = codes_store.lock_code(uow.conn, programa, promo_id, codigo)
    if code is None:
        raise LoyaltyError(
            CodigoError.CODIGO_NO_ENCONTRADO,
            f"codigo: la promoción {promo_id} no tiene el código {shown(codigo)}",
        )
    return code


def assign_code(
    uow: UnitOfWork, programa: str, promo_id: int, codigo: str, fan_id: str
) -> CodigoInfo:
    """disponible → asignado to an `activo` fan, now."""
    programa = program_id(programa, "programa")
    codigo = normalize_code(codigo)
    fid = canonical_fan_id(fan_id, "fan")
    code = _locked_code(uow, programa, promo_id, codigo)
    fan = lookups.require_fan(uow.conn, programa, fid, lock=True)
    if fan.estado != EstadoFan.ACTIVO:
        raise LoyaltyError(CodigoError.FAN_NO_ENCONTRADO, f"fan: {shown(fid)} está de baja")
    check_transicion_codigo(codigo, code.estado, EstadoCodigo.ASIGNADO)
    codes_store.mark_assigned(uow.conn, programa, code.id, fan.pk)
    return codes_store.code_info(uow.conn, programa, code.id)


def release_code(uow: UnitOfWork, programa: str, promo_id: int, codigo: str) -> CodigoInfo:
    """disponible or asignado → liberado, now. A delivered code keeps its fan."""
    programa = program_id(programa, "programa")
    codigo = normalize_code(codigo)
    code = _locked_code(uow, programa, promo_id, codigo)
    check_transicion_codigo(codigo, code.estado, EstadoCodigo.LIBERADO)
    codes_store.mark_released(uow.conn, programa, code.id)
    return codes_store.code_info(uow.conn, programa, code.id)


def assign_next_code(uow: UnitOfWork, programa: str, promo_id: int, fan_id: str) -> CodigoInfo:
    """The promotion's oldest `disponible` code (deposit order) → asignado to an `activo`
    fan, now. Race-free: concurrent calls each get a different code and never wait for one
    another (store/codes.py `lock_next_available`). None left → codigo_no_encontrado (the
    code asked for, the next available one, does not exist)."""
    programa = program_id(programa, "programa")
    fid = canonical_fan_id(fan_id, "fan")
    lookups.require_promo(uow.conn, programa, promo_id)
    fan = lookups.require_fan(uow.conn, programa, fid, lock=True)
    if fan.estado != EstadoFan.ACTIVO:
        raise LoyaltyError(CodigoError.FAN_NO_ENCONTRADO, f"fan: {shown(fid)} está de baja")
    code_pk = codes_store.lock_next_available(uow.conn, programa, promo_id)
    if code_pk is None:
        raise LoyaltyError(
            CodigoError.CODIGO_NO_ENCONTRADO,
            f"promo_id: la promoción {promo_id} no tiene códigos "
            "disponibles (deposite más con `admin codes import`)",
        )
    codes_store.mark_assigned(uow.conn, programa, code_pk, fan.pk)
    return codes_store.code_info(uow.conn, programa, code_pk)
