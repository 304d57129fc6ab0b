"""The one place where points move: a ledger entry, the cached balance and the wallet-pass
outbox change together, in the caller's transaction.

The rule is one database function, `loyalty_move` (migration 0014; its one-fan case is
`loyalty_move1`, migration 0017, which the sale and the single redemption call directly,
no arrays): entries (fan, points, sale, code) of the program's fans; entries with 0 points
change nothing; one ledger row per entry, one balance change and one outbox row per fan,
the outbox row written after the balance UPDATE (so one fan's outbox ids follow the order
of its balance changes: store/wallet.py's claim relies on it); a fan that does not exist
writes nothing.
`move_points` calls it for one fan inside a unit of work (back office, fixtures),
`move_many` for a set; the hot paths' functions (`loyalty_tx`, `loyalty_redeem`: store/
sale.py, store/redeem.py) call it inside the database, so a sale or a redemption is one
round trip and the rule is still written once.

Locks: several fans are locked first, in pk order, the order every multi-fan writer
keeps, so that two of them cannot deadlock. One fan (the sale, a single redemption, a
single move): the balance UPDATE takes the row lock itself, and nothing else. Locking it
first and then updating in one statement takes the lock twice: when the statement's
snapshot is older than the version locked, the UPDATE locks that version again
(EvalPlanQual), queued behind a transaction waiting for ours: a deadlock, observed as 5 of
10,000 concurrent sales to one fan (tests/e2e/test_upgrade.py) when the rule was CTEs.

Every statement names the program: the fans' rows by (programa_id, pk), and the ledger and
outbox rows it inserts carry it, so that a move touches one program's rows only (on a
cluster sharded by program, one shard, where Citus runs the function: docs/citus.md).
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


# The rule itself is the function `loyalty_move` (migration 0014), called as
# `SELECT * FROM loyalty_move(…)`: the only form of call Citus delegates to the node of the
# program's shard (docs/citus.md). Entries are parallel arrays; it returns (fan_pk, saldo)
# of each fan that moved.
MOVE = """
SELECT * FROM loyalty_move(%(programa)s, CAST(%(fan_pks)s AS bigint[]),
                           CAST(%(puntos)s AS bigint[]), CAST(%(venta_ids)s AS integer[]),
                           CAST(%(codigo_ids)s AS bigint[]), %(motivo)s, %(nota)s)
"""

# A zero-point move's answer: the fan's current balance.
_BALANCE = "SELECT puntos FROM fans WHERE programa_id = %(programa)s AND pk = %(fan_pk)s"


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
    if puntos == 0:
        balance = conn.exec_driver_sql(_BALANCE, {"programa": programa, "fan_pk": fan_pk}).scalar()
    else:
        moved = move_many(
            conn,
            programa,
            [Move(fan_pk, puntos, venta_id=venta_id, codigo_id=codigo_id)],
            motivo,
            nota=nota,
        )
        balance = moved.get(fan_pk)
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


def move_many(
    conn: Connection, programa: str, moves: Sequence[Move], motivo: Motivo, *, nota: str = ""
) -> dict[int, int]:
    """`move_points` for a set of entries of the program's fans in one statement:
    one ledger entry each, one balance change and outbox row per fan. Returns the new
    balance of each fan that moved."""
    if not moves:
        return {}
    rows = conn.exec_driver_sql(
        MOVE,
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
