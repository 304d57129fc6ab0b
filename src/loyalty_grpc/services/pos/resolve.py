"""`fan/resolve`: who the fan is and which promotion is current for them. Changes nothing.
One statement (store/resolve.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.fan_ref import FanRef, not_found
from loyalty_grpc.store.db import Database
from loyalty_grpc.store.resolve import fan_and_promo

# A promotion is current through the whole of its `vigencia_fin` day wherever the fan is:
# the date is taken "anywhere on Earth" (UTC-12), so a kiosk never refuses a promotion
# that is still valid in its own time zone.
_ANYWHERE_ON_EARTH = timezone(timedelta(hours=-12))


@dataclass(frozen=True)
class FoundFan:
    fan_id: str
    nombre: str
    correo: str
    socio_desde: int
    temporadas: int
    puntos: int


@dataclass(frozen=True)
class CurrentPromo:
    nombre: str
    descripcion: str
    vigencia_fin: date
    codigo: str


@dataclass(frozen=True)
class Resolved:
    fan: FoundFan
    promo: CurrentPromo | None


def promo_day(now: datetime) -> date:
    return now.astimezone(_ANYWHERE_ON_EARTH).date()


def resolve_fan(engine: Database, caller: Caller, ref: FanRef, now: datetime) -> Resolved:
    if not ref.matchable:
        raise not_found(ref)
    row = fan_and_promo(engine, caller.programa_id, ref, promo_day(now))
    if row is None:
        raise not_found(ref)
    (
        _,
        fan_id,
        nombre,
        correo,
        socio_desde,
        temporadas,
        puntos,
        promo_nombre,
        descripcion,
        vigencia_fin,
        codigo,
    ) = row
    fan = FoundFan(
        fan_id=fan_id,
        nombre=nombre,
        correo=correo,
        socio_desde=socio_desde,
        temporadas=temporadas,
        puntos=int(puntos),
    )
    promo = (
        None
        if promo_nombre is None
        else CurrentPromo(promo_nombre, descripcion, vigencia_fin, codigo)
    )
    return Resolved(fan, promo)
