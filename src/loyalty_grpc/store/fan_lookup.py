"""The readings of a POS `fan` value (domain/fan_ref.py, in its order) as SQL: for each
form, a query giving the one active fan of the program it names, best reading first.

`fan/resolve` puts it first in its single statement (`WITH fan AS (...)`), so the lookup
costs no round trip of its own; `tx`'s function (`loyalty_tx`, migration 0014) holds a
frozen copy of the three readings. Parameters: %(programa)s, %(valor)s (the normalised
value) and, for the text form, %(crudo)s (the value as scanned). Columns: the fan's
`pk, fan_id, nombre, correo, socio_desde, temporadas, puntos` and `via_codigo`, the coupon
code's row id when the fan was identified by a code (else NULL). Every table it reads is
filtered by %(programa)s, and codes join their fan on (programa_id, pk).
"""

from __future__ import annotations

from loyalty_grpc.domain.fan_ref import FanRef, Forma
from loyalty_grpc.domain.promos import EstadoCodigo, EstadoFan

_FAN = "f.pk, f.fan_id, f.nombre, f.correo, f.socio_desde, f.temporadas, f.puntos"
_ACTIVE = f"f.programa_id = %(programa)s AND f.estado = '{EstadoFan.ACTIVO.value}'"

_BY_QR_TOKEN = f"""SELECT {_FAN}, NULL::bigint AS via_codigo FROM fans f
  WHERE {_ACTIVE} AND f.qr_token = %(valor)s"""  # noqa: S608 (constants)

# %(valor)s is domain.fans.email_key of the value: ASCII letters lower-cased, nothing else
# folded; lower(... COLLATE "C") is the same fold, and the expression of the unique index
# uq_fans_programa_correo (store/tables.py), so this is one index lookup.
_BY_CORREO = f"""SELECT {_FAN}, NULL::bigint AS via_codigo FROM fans f
  WHERE {_ACTIVE} AND lower(f.correo COLLATE "C") = %(valor)s"""  # noqa: S608 (constants)

# A Fan ID, else a coupon code delivered to a fan (of several copies of one text, a
# redeemable `asignado` one first, then the oldest), else the raw value as a QR token.
_BY_TEXT = f"""SELECT pk, fan_id, nombre, correo, socio_desde, temporadas, puntos, via_codigo
FROM (
  SELECT {_FAN}, NULL::bigint AS via_codigo, 1 AS prio, 0 AS orden FROM fans f
    WHERE {_ACTIVE} AND f.fan_id = %(valor)s
  UNION ALL
  SELECT {_FAN}, c.id, 2, CASE WHEN c.estado = '{EstadoCodigo.ASIGNADO.value}' THEN 0 ELSE 1 END
    FROM codigos c JOIN fans f ON f.programa_id = c.programa_id AND f.pk = c.fan_pk
    WHERE c.programa_id = %(programa)s AND c.codigo = %(valor)s
      AND c.estado IN ('{EstadoCodigo.ASIGNADO.value}', '{EstadoCodigo.CANJEADO.value}')
      AND {_ACTIVE}
  UNION ALL
  SELECT {_FAN}, NULL::bigint, 3, 0 FROM fans f
    WHERE {_ACTIVE} AND f.qr_token = %(crudo)s
) AS lecturas
ORDER BY prio, orden, via_codigo
LIMIT 1"""  # noqa: S608 (only constants are interpolated)

LOOKUP: dict[Forma, str] = {
    Forma.QR_URL: _BY_QR_TOKEN,
    Forma.CORREO: _BY_CORREO,
    Forma.TEXTO: _BY_TEXT,
}


def lookup_params(programa: str, ref: FanRef) -> dict[str, object]:
    return {"programa": programa, "valor": ref.valor, "crudo": ref.crudo}
