"""Redeeming ONE coupon code (the single form of `redeem`) as one statement: lock every
copy of the text in the program (in id order, as every redemption does), choose the copy by
the domain's order of preference (domain/redeem.py PREFERENCIA, then the oldest), redeem it
if it is `asignado`, credit its promotion's `puntos_canje` to its fan through the ledger's
CTEs (store/ledger.py), and return the chosen copy's state before the redemption; one round
trip, atomic (store/autocommit.py).

A concurrent redemption of the same text waits on the copies' row locks and then reads the
state the other one committed, so of 20 concurrent redemptions one redeems and credits.
Locks are taken codes first, then the fan (the balance UPDATE), the order every other
redemption and sale keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine

from loyalty_grpc.domain.promos import EstadoCodigo
from loyalty_grpc.domain.redeem import PREFERENCIA
from loyalty_grpc.store.autocommit import fetch_one
from loyalty_grpc.store.ledger import Motivo, move_ctes

REDEEM = f"""
WITH copias AS (
  SELECT id, estado, fan_pk, promo_id FROM codigos
  WHERE programa_id = %(programa)s AND codigo = %(codigo)s
  ORDER BY id
  FOR NO KEY UPDATE
), elegida AS (
  SELECT * FROM copias
  ORDER BY array_position(CAST(%(preferencia)s AS text[]), estado), id
  LIMIT 1
), quemada AS (
  UPDATE codigos SET estado = '{EstadoCodigo.CANJEADO.value}', canjeado_en = %(ts)s,
         canje_terminal = %(terminal)s, canje_clave_id = %(clave_id)s,
         canje_registrado = %(ahora)s
  FROM elegida
  WHERE codigos.id = elegida.id AND elegida.estado = '{EstadoCodigo.ASIGNADO.value}'
  RETURNING codigos.fan_pk,
            CASE WHEN %(vivo)s
                 THEN (SELECT puntos_canje FROM promos WHERE id = codigos.promo_id)
                 ELSE 0 END AS puntos,
            NULL::integer AS venta_id, codigos.id AS codigo_id
), {move_ctes("quemada", one_fan=True)}
SELECT elegida.id, elegida.estado, p.nombre, p.puntos_canje, f.correo
FROM elegida
JOIN promos p ON p.id = elegida.promo_id
LEFT JOIN fans f ON f.pk = elegida.fan_pk
"""  # noqa: S608 (only constants are interpolated)


@dataclass(frozen=True)
class RedeemRow:
    """The copy the redemption acted on, as it was before: its id, state, promotion's name
    and points per redemption, and its fan's e-mail ("" when it has no fan)."""

    copia: int
    estado: EstadoCodigo
    promo: str
    puntos_canje: int
    correo: str


@dataclass(frozen=True)
class RedeemValues:
    programa: str
    codigo: str  # normalised (domain/codes.code_text)
    vivo: bool  # a live key: the redemption credits the promotion's points
    clave_id: int
    terminal: str | None
    ts: datetime  # the POS's time of the redemption
    ahora: datetime  # when the server recorded it


def redeem_one(engine: Engine, values: RedeemValues) -> RedeemRow | None:
    """Redeem the text's preferred copy if it is `asignado`; None when the program has no
    copy of it."""
    row = fetch_one(
        engine,
        REDEEM,
        {
            "programa": values.programa,
            "codigo": values.codigo,
            "preferencia": list(PREFERENCIA),
            "ts": values.ts,
            "terminal": values.terminal,
            "clave_id": values.clave_id,
            "ahora": values.ahora,
            "vivo": values.vivo,
            "motivo": Motivo.CANJE.value,
            "nota": "",
        },
    )
    if row is None:
        return None
    copia, estado, promo, puntos_canje, correo = row
    return RedeemRow(
        copia=copia,
        estado=EstadoCodigo(estado),
        promo=promo,
        puntos_canje=int(puntos_canje),
        correo=correo or "",
    )
