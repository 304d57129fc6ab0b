"""The one place where points move: a ledger entry, the cached balance and the wallet-pass
outbox change together, in the caller's transaction."""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import BigInteger, Connection, Integer, Text, insert, literal, select, update

from loyalty_grpc.store.tables import fans, movimientos, wallet_outbox


class Motivo(StrEnum):
    VENTA = "venta"
    CANJE = "canje"
    AJUSTE = "ajuste"
    ANULACION = "anulacion"


def move_points(
    conn: Connection,
    fan_pk: int,
    puntos: int,
    motivo: Motivo,
    *,
    venta_id: int | None = None,
    codigo_id: int | None = None,
    nota: str = "",
) -> int:
    """Append a ledger entry of `puntos` (may be negative) and return the new balance.
    Zero-point moves write nothing and return the current balance.

    The new balance also goes to `wallet_outbox` (the fan's wallet pass is refreshed from
    it, DESIGN.md §2 "Wallet pass"), so every balance change, whatever its motive, reaches
    the pass, and none does unless the caller commits. One statement (one round trip): the
    balance UPDATE and both INSERTs are data-modifying CTEs."""
    if puntos == 0:
        current = conn.execute(select(fans.c.puntos).where(fans.c.pk == fan_pk)).scalar_one()
        return int(current)
    changed = (
        update(fans)
        .where(fans.c.pk == fan_pk)
        .values(puntos=fans.c.puntos + puntos)
        .returning(fans.c.pk, fans.c.puntos)
        .cte("changed")
    )
    ledger = insert(movimientos).from_select(
        ["fan_pk", "puntos", "motivo", "venta_id", "codigo_id", "nota"],
        select(changed.c.pk, literal(puntos, BigInteger), literal(motivo.value, Text),
               literal(venta_id, Integer), literal(codigo_id, BigInteger), literal(nota, Text)),
    ).cte("ledger")
    outbox = insert(wallet_outbox).from_select(
        ["fan_pk", "saldo"], select(changed.c.pk, changed.c.puntos),
    ).cte("outbox")
    # No row: no such fan (NoResultFound, nothing written), as before.
    balance = conn.execute(select(changed.c.puntos).add_cte(ledger, outbox)).scalar_one()
    return int(balance)
