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

What a redemption credited when it was applied (`puntos_acreditados`, on first answers and
duplicates alike) is in the ledger: its `canje` entry, not the promotion's `puntos_canje`
now (the back office may have changed it since). A first redemption knows it without a
read (it is what it credits). A duplicate reads it with `CREDITED`, a statement of its own
run after the redemption's: a concurrent redemption that this one waited for committed
its ledger entry after this statement's snapshot was taken, so a subquery in `REDEEM`
would not see it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, Engine

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


# What the redemptions of the copies %(ids)s credited: each copy's latest `canje` ledger
# entry (0 when it has none: redeemed with a test key, a promotion worth 0 points, a code
# recorded as `canjeado` by a fixture). The entry belongs to the code's fan (a redemption
# credits the code's fan, and a redeemed code keeps it; a fixture that moves a redeemed
# code to another fan makes it 0), so the fan's ledger index (ix_movimientos_fan) finds it
# among that fan's entries, with no index of its own to write on every redemption. Its cost
# grows with the fan's ledger (EXPLAIN ANALYZE: 0.2-0.3 ms for a fan with 2,500 entries),
# on the duplicate path only.
CREDITED = f"""
SELECT c.id, coalesce((
  SELECT m.puntos FROM movimientos m
  WHERE m.fan_pk = c.fan_pk AND m.codigo_id = c.id AND m.motivo = '{Motivo.CANJE.value}'
  ORDER BY m.id DESC LIMIT 1), 0)
FROM codigos c
WHERE c.id = ANY(CAST(%(ids)s AS bigint[]))
"""  # noqa: S608 (only constants are interpolated)


def credited_by_redemption(engine: Engine, copia: int) -> int:
    """What the redemption of copy `copia` credited (one autocommit statement)."""
    row = fetch_one(engine, CREDITED, {"ids": [copia]})
    if row is None:  # a redeemed code is never deleted
        raise LookupError(f"no code with id {copia}")
    return int(row[1])


def credited_by_redemptions(conn: Connection, copias: Collection[int]) -> dict[int, int]:
    """`credited_by_redemption` for several copies in one statement, in the caller's
    transaction: the points by copy id."""
    if not copias:
        return {}
    rows = conn.exec_driver_sql(CREDITED, {"ids": sorted(copias)}).all()
    return {int(copia): int(puntos) for copia, puntos in rows}
