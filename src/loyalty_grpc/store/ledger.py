"""The one place where points move: a ledger entry, the cached balance and the wallet-pass
outbox change together, in the caller's statement and transaction.

`move_ctes` is that rule as SQL: CTEs that credit each row of a source relation (columns
fan_pk, puntos, venta_id, codigo_id) to its fan, every fan of the program %(programa)s.
`move_points` runs it for one fan inside a unit of work (back office, fixtures), `move_many`
for a set (a batch of redemptions); the hot paths' single statements (store/sale.py,
store/redeem.py) put the same CTEs after their own source, so a sale or a redemption is one
round trip and the rule is still written once.

Every statement names the program: the fans' rows by (programa_id, pk), and the ledger and
outbox rows it inserts carry it, so that a move touches one program's rows only (on a
cluster sharded by program, one shard: docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import Connection


class Motivo(StrEnum):
    VENTA = "venta"
    CANJE = "canje"
    AJUSTE = "ajuste"
    ANULACION = "anulacion"


def move_ctes(source: str, *, one_fan: bool = False) -> str:
    """CTEs `movido` (fan_pk, saldo: the new balance), `ledger` and `outbox` crediting each
    row of the relation `source` (fan_pk, puntos, venta_id, codigo_id; parameters
    %(programa)s, %(motivo)s and %(nota)s) to its fan of the program %(programa)s: one
    ledger entry per row, one balance change and one outbox row per fan. Rows with 0 points
    change nothing. A row whose fan does not exist writes nothing. The outbox row is written
    after the balance UPDATE (it reads `movido`), so one fan's outbox ids follow the order
    of its balance changes (store/wallet.py's claim relies on it).
    Several fans: their rows are locked first, in pk order (`bloqueados`), the order every
    multi-fan writer keeps, so that two of them cannot deadlock. One fan (`one_fan`: the
    sale, a single redemption, a single move): the UPDATE takes the row lock itself, and nothing
    else. Locking it first and then updating would take the lock twice: when the
    statement's snapshot is older than the version locked, the UPDATE locks that version
    again (EvalPlanQual), queued behind a transaction waiting for ours: a deadlock,
    observed as 5 of 10,000 concurrent sales to one fan (tests/e2e/test_upgrade.py)."""
    if one_fan:
        locked = ""
        movido = f"""movido AS (
  UPDATE fans SET puntos = fans.puntos + m.puntos
  FROM (SELECT fan_pk, CAST(sum(puntos) AS bigint) AS puntos FROM {source}
        WHERE puntos <> 0 GROUP BY fan_pk) AS m
  WHERE fans.programa_id = %(programa)s AND fans.pk = m.fan_pk
  RETURNING fans.pk AS fan_pk, fans.puntos AS saldo
)"""  # noqa: S608 (`source` is a CTE name of ours)
    else:
        locked = f"""bloqueados AS MATERIALIZED (
  SELECT pk FROM fans
  WHERE programa_id = %(programa)s AND pk IN (SELECT fan_pk FROM {source} WHERE puntos <> 0)
  ORDER BY pk FOR NO KEY UPDATE
), """  # noqa: S608 (`source` is a CTE name of ours)
        movido = f"""movido AS (
  UPDATE fans SET puntos = fans.puntos + suma.puntos
  FROM (SELECT fan_pk, CAST(sum(puntos) AS bigint) AS puntos FROM {source}
        WHERE puntos <> 0 GROUP BY fan_pk) AS suma
  JOIN bloqueados ON bloqueados.pk = suma.fan_pk
  WHERE fans.programa_id = %(programa)s AND fans.pk = suma.fan_pk
  RETURNING fans.pk AS fan_pk, fans.puntos AS saldo
)"""  # noqa: S608 (`source` is a CTE name of ours)
    return f"""{locked}{movido}, ledger AS (
  INSERT INTO movimientos (programa_id, fan_pk, puntos, motivo, venta_id, codigo_id, nota)
  SELECT %(programa)s, m.fan_pk, m.puntos, %(motivo)s, m.venta_id, m.codigo_id, %(nota)s
  FROM {source} AS m JOIN movido ON movido.fan_pk = m.fan_pk
  WHERE m.puntos <> 0
), outbox AS (
  INSERT INTO wallet_outbox (programa_id, fan_pk, saldo)
  SELECT %(programa)s, fan_pk, saldo FROM movido
)"""  # noqa: S608 (`source` is a CTE name of ours)


# One fan, any motive: the new balance, or the current one for a zero-point move.
_MOVE_ONE = f"""
WITH mover AS (
  SELECT CAST(%(fan_pk)s AS bigint) AS fan_pk, CAST(%(puntos)s AS bigint) AS puntos,
         CAST(%(venta_id)s AS integer) AS venta_id, CAST(%(codigo_id)s AS bigint) AS codigo_id
), {move_ctes("mover", one_fan=True)}
SELECT coalesce((SELECT saldo FROM movido),
                (SELECT puntos FROM fans
                 WHERE programa_id = %(programa)s AND pk = %(fan_pk)s AND %(puntos)s = 0))
"""  # noqa: S608 (only constants are interpolated)


def move_points(
    conn: Connection,
    programa: str,
    fan_pk: int,
    puntos: int,
    motivo: Motivo,
    *,
    venta_id: int | None = None,
    codigo_id: int | None = None,
    nota: str = "",
) -> int:
    """Append a ledger entry of `puntos` (may be negative) to the program's fan `fan_pk` and
    return the new balance.
    Zero-point moves write nothing and return the current balance.

    The new balance also goes to `wallet_outbox` (the fan's wallet pass is refreshed from
    it, DESIGN.md §2 "Wallet pass"), so every balance change, whatever its motive, reaches
    the pass, and none does unless the caller commits. One statement (one round trip)."""
    balance = conn.exec_driver_sql(
        _MOVE_ONE,
        {
            "programa": programa,
            "fan_pk": fan_pk,
            "puntos": puntos,
            "venta_id": venta_id,
            "codigo_id": codigo_id,
            "motivo": motivo.value,
            "nota": nota,
        },
    ).scalar()
    if balance is None:
        raise LookupError(f"no fan with pk {fan_pk} in {programa}")
    return int(balance)


@dataclass(frozen=True)
class Move:
    """One ledger entry of a set (`move_many`)."""

    fan_pk: int
    puntos: int
    venta_id: int | None = None
    codigo_id: int | None = None


_MOVE_MANY = f"""
WITH mover AS (
  SELECT * FROM unnest(CAST(%(fan_pks)s AS bigint[]), CAST(%(puntos)s AS bigint[]),
                       CAST(%(venta_ids)s AS integer[]), CAST(%(codigo_ids)s AS bigint[]))
    AS m(fan_pk, puntos, venta_id, codigo_id)
), {move_ctes("mover")}
SELECT fan_pk, saldo FROM movido
"""  # noqa: S608 (only constants are interpolated)


def move_many(
    conn: Connection, programa: str, moves: Sequence[Move], motivo: Motivo, *, nota: str = ""
) -> dict[int, int]:
    """`move_points` for a set of entries of the program's fans in one statement:
    one ledger entry each, one balance change and outbox row per fan. Returns the new
    balance of each fan that moved."""
    if not moves:
        return {}
    rows = conn.exec_driver_sql(
        _MOVE_MANY,
        {
            "programa": programa,
            "fan_pks": [m.fan_pk for m in moves],
            "puntos": [m.puntos for m in moves],
            "venta_ids": [m.venta_id for m in moves],
            "codigo_ids": [m.codigo_id for m in moves],
            "motivo": motivo.value,
            "nota": nota,
        },
    ).all()
    return {int(fan_pk): int(saldo) for fan_pk, saldo in rows}
