"""Back office: promotions of a program (create, update). A promotion's name is unique
within its program, case-insensitively: checked before the insert, and the unique index
uq_promos_programa_nombre answers a concurrent creation of the same name the same way
(store/promos.py)."""

from __future__ import annotations

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
from loyalty_grpc.store import lookups
from loyalty_grpc.store import promos as promos_store
from loyalty_grpc.store.promos import PromoInfo
from loyalty_grpc.store.uow import UnitOfWork

__all__ = ["PromoInfo", "create_promo", "update_promo"]


def _duplicada(nombre: str) -> LoyaltyError:
    return LoyaltyError(
        CodigoError.PROMO_DUPLICADA, f"nombre: el programa ya tiene una promoción {shown(nombre)}"
    )


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
    programa = program_id(programa, "programa")
    nombre = promo_name(nombre, "nombre")
    descripcion = multi_line(descripcion, "descripcion")
    nuevo = parse_estado_promo(estado) if estado.strip() else EstadoPromo.ACTIVA
    fin = parse_fecha(vigencia_fin)
    puntos_canje = check_puntos_canje(puntos_canje)
    lookups.require_program(uow.conn, programa)
    if promos_store.name_taken(uow.conn, programa, nombre):
        raise _duplicada(nombre)
    return promos_store.insert_promo(
        uow.conn,
        programa=programa,
        nombre=nombre,
        descripcion=descripcion,
        estado=nuevo,
        vigencia_fin=fin,
        puntos_canje=puntos_canje,
        duplicada=_duplicada(nombre),
    )


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
    programa = program_id(programa, "programa")
    nuevo = None if estado is None else parse_estado_promo(estado)
    fin = None if vigencia_fin is None else parse_fecha(vigencia_fin)
    puntos = None if puntos_canje is None else check_puntos_canje(puntos_canje)
    texto = None if descripcion is None else multi_line(descripcion, "descripcion")
    current = lookups.require_promo(uow.conn, programa, promo_id, lock=True)
    if nuevo is not None:
        check_transicion_promo(current.nombre, EstadoPromo(current.estado), nuevo)
    if nuevo is None and fin is None and puntos is None and texto is None:
        return promos_store.promo_info(current)
    return promos_store.update_promo(
        uow.conn,
        programa,
        current.id,
        estado=nuevo,
        vigencia_fin=fin,
        puntos_canje=puntos,
        descripcion=texto,
    )
