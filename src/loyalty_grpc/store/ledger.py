"""The one place where points move: a ledger entry and the cached balance change together,
in the caller's transaction."""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import Connection, insert, select, update

from loyalty_grpc.store.tables import fans, movimientos


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
    Zero-point moves write nothing and return the current balance."""
    if puntos == 0:
        current = conn.execute(select(fans.c.puntos).where(fans.c.pk == fan_pk)).scalar_one()
        return int(current)
    balance = conn.execute(
        update(fans)
        .where(fans.c.pk == fan_pk)
        .values(puntos=fans.c.puntos + puntos)
        .returning(fans.c.puntos)
    ).scalar_one()
    conn.execute(
        insert(movimientos).values(
            fan_pk=fan_pk, puntos=puntos, motivo=motivo.value, venta_id=venta_id,
            codigo_id=codigo_id, nota=nota,
        )
    )
    return int(balance)
