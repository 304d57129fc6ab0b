"""`fan/resolve`: who the fan is and which promotion is current for them. Changes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from sqlalchemy import Connection, Engine, select

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.fan_ref import FanRef
from loyalty_grpc.services.fan_lookup import FoundFan, find_fan
from loyalty_grpc.store.tables import codigos, promos

# A promotion is current through the whole of its `vigencia_fin` day wherever the fan is:
# the date is taken "anywhere on Earth" (UTC-12), so a kiosk never refuses a promotion
# that is still valid in its own time zone.
_ANYWHERE_ON_EARTH = timezone(timedelta(hours=-12))


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


def current_promo(conn: Connection, fan: FoundFan, today: date) -> CurrentPromo | None:
    """The fan's `asignado` code in an `activa` promotion whose `vigencia_fin` is today or
    later, earliest end first; the code that identified the fan wins when it qualifies."""
    query = (
        select(promos.c.nombre, promos.c.descripcion, promos.c.vigencia_fin, codigos.c.codigo)
        .join(promos, promos.c.id == codigos.c.promo_id)
        .where(codigos.c.fan_pk == fan.pk, codigos.c.estado == "asignado",
               promos.c.estado == "activa", promos.c.vigencia_fin >= today)
        .order_by((codigos.c.id == (fan.via_codigo or 0)).desc(), promos.c.vigencia_fin,
                  codigos.c.id)
        .limit(1)
    )
    row = conn.execute(query).first()
    if row is None:
        return None
    return CurrentPromo(row.nombre, row.descripcion, row.vigencia_fin, row.codigo)


def resolve_fan(engine: Engine, caller: Caller, ref: FanRef, now: datetime) -> Resolved:
    with engine.connect() as conn:
        fan = find_fan(conn, caller.programa_id, ref)
        return Resolved(fan, current_promo(conn, fan, promo_day(now)))
