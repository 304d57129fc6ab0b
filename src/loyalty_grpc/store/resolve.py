"""`fan/resolve` as ONE read-only statement: the fan a POS value names (store/fan_lookup.py)
and the promotion current for them, in one round trip (store/autocommit.py)."""

from __future__ import annotations

from datetime import date

from sqlalchemy import Engine

from loyalty_grpc.domain.fan_ref import FanRef, Forma
from loyalty_grpc.domain.promos import EstadoCodigo, EstadoPromo
from loyalty_grpc.store.autocommit import Row, fetch_one
from loyalty_grpc.store.fan_lookup import LOOKUP, lookup_params

# The fan's `asignado` code in an `activa` promotion whose `vigencia_fin` is %(hoy)s or
# later, earliest end first; the code that identified the fan wins when it qualifies. The
# fan's codes are read by (programa_id, fan_pk), their promotions by (programa_id, id).
_RESOLVE = f"""
WITH fan AS ({{lookup}})
SELECT fan.pk, fan.fan_id, fan.nombre, fan.correo, fan.socio_desde, fan.temporadas,
       fan.puntos, promo.nombre, promo.descripcion, promo.vigencia_fin, promo.codigo
FROM fan LEFT JOIN LATERAL (
  SELECT p.nombre, p.descripcion, p.vigencia_fin, c.codigo
  FROM codigos c JOIN promos p ON p.programa_id = c.programa_id AND p.id = c.promo_id
  WHERE c.programa_id = %(programa)s AND c.fan_pk = fan.pk
    AND c.estado = '{EstadoCodigo.ASIGNADO.value}'
    AND p.estado = '{EstadoPromo.ACTIVA.value}'
    AND p.vigencia_fin >= %(hoy)s
  ORDER BY c.id = coalesce(fan.via_codigo, 0) DESC, p.vigencia_fin, c.id
  LIMIT 1
) AS promo ON true
"""  # noqa: S608 (only constants are interpolated)

RESOLVE: dict[Forma, str] = {
    forma: _RESOLVE.format(lookup=lookup) for forma, lookup in LOOKUP.items()
}


def fan_and_promo(engine: Engine, programa: str, ref: FanRef, hoy: date) -> Row | None:
    """(pk, fan_id, nombre, correo, socio_desde, temporadas, puntos, and the promotion's
    nombre, descripcion, vigencia_fin, codigo or four NULLs); None when no active fan."""
    return fetch_one(engine, RESOLVE[ref.forma], {**lookup_params(programa, ref), "hoy": hoy})
