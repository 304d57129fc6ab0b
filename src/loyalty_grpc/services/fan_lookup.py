"""Finding the fan a POS `fan` value names, within the calling key's program, in one round
trip: the readings of domain/fan_ref.py in their order; only fans in `activo` count."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, Select, func, literal, null, select, union_all

from loyalty_grpc.domain.errors import Codigo, LoyaltyError
from loyalty_grpc.domain.fan_ref import FanRef, Forma
from loyalty_grpc.store.tables import codigos, fans


@dataclass(frozen=True)
class FoundFan:
    pk: int
    fan_id: str
    nombre: str
    correo: str
    socio_desde: int
    temporadas: int
    puntos: int
    # The coupon code's row id when the fan was identified by a code, else None.
    via_codigo: int | None


def _fans(programa: str, prio: int) -> Select[tuple[object, ...]]:
    return select(fans.c.pk, fans.c.fan_id, fans.c.nombre, fans.c.correo, fans.c.socio_desde,
                  fans.c.temporadas, fans.c.puntos, literal(prio).label("prio"),
                  null().label("via_codigo"), literal(0).label("orden")
                  ).where(fans.c.programa_id == programa, fans.c.estado == "activo")


def _query(programa: str, ref: FanRef) -> Select[tuple[object, ...]]:
    if ref.forma is Forma.QR_URL:
        return _fans(programa, 1).where(fans.c.qr_token == ref.valor)
    if ref.forma is Forma.CORREO:
        return _fans(programa, 1).where(func.lower(fans.c.correo) == ref.valor)
    by_code = (
        select(fans.c.pk, fans.c.fan_id, fans.c.nombre, fans.c.correo, fans.c.socio_desde,
               fans.c.temporadas, fans.c.puntos, literal(2).label("prio"),
               codigos.c.id.label("via_codigo"),
               # A deterministic choice when one code text is in several promotions:
               # a burnable (asignado) one first, then the oldest.
               (codigos.c.estado != "asignado").cast(fans.c.temporadas.type).label("orden"))
        .join(fans, fans.c.pk == codigos.c.fan_pk)
        .where(codigos.c.programa_id == programa, codigos.c.codigo == ref.valor,
               codigos.c.estado.in_(("asignado", "canjeado")), fans.c.estado == "activo")
    )
    union = union_all(
        _fans(programa, 1).where(fans.c.fan_id == ref.valor),
        by_code,
        _fans(programa, 3).where(fans.c.qr_token == ref.crudo),
    ).subquery()
    return select(union).order_by(union.c.prio, union.c.orden, union.c.via_codigo).limit(1)


def find_fan(conn: Connection, programa: str, ref: FanRef) -> FoundFan:
    """The active fan `ref` names, or fan_no_encontrado (the value is never echoed: it is
    personal data)."""
    row = conn.execute(_query(programa, ref).limit(1)).first()
    if row is None:
        raise LoyaltyError(Codigo.FAN_NO_ENCONTRADO,
                           f"ningún fan activo del programa coincide (leído como {ref.forma})")
    return FoundFan(pk=row.pk, fan_id=row.fan_id, nombre=row.nombre, correo=row.correo,
                    socio_desde=row.socio_desde, temporadas=row.temporadas,
                    puntos=int(row.puntos), via_codigo=row.via_codigo)
