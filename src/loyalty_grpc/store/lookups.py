"""The back office's reads of a program, a fan or a promotion by its public id (locked or
not), each with its not-found error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Row, Select, select

from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.store.fans import FanRow, fan_row
from loyalty_grpc.store.tables import fans, programas, promos

# A promotion's row (every column of `promos`). Its record comes with the promotions'
# store module (store/promos.py), whose result services/backoffice/promos.py builds from it.
PromoRow = Row[*tuple[Any, ...]]


def require_program(conn: Connection, programa: str) -> None:
    """programa_no_encontrado unless the program exists (locked against a concurrent
    change of its row until the transaction ends: KEY SHARE, so it blocks nobody else)."""
    found = conn.execute(
        select(programas.c.id).where(programas.c.id == programa).with_for_update(key_share=True)
    ).scalar_one_or_none()
    if found is None:
        raise LoyaltyError(
            CodigoError.PROGRAMA_NO_ENCONTRADO, f"programa: no existe {shown(programa)}"
        )


def require_fan(conn: Connection, programa: str, fan_id: str, *, lock: bool = False) -> FanRow:
    """The fan (any state; its row locked FOR UPDATE with `lock`), or fan_no_encontrado;
    the program must exist."""
    query = select(fans).where(fans.c.programa_id == programa, fans.c.fan_id == fan_id)
    return fan_row(
        _require(
            conn,
            query,
            lock,
            programa,
            lambda: LoyaltyError(
                CodigoError.FAN_NO_ENCONTRADO,
                f"fan: no existe {shown(fan_id)} en {shown(programa)}",
            ),
        )
    )


def require_promo(
    conn: Connection, programa: str, promo_id: int, *, lock: bool = False
) -> PromoRow:
    """The promotion's row (locked FOR UPDATE with `lock`), or promo_no_encontrada; the
    program must exist."""
    query = select(promos).where(promos.c.programa_id == programa, promos.c.id == promo_id)
    return _require(
        conn,
        query,
        lock,
        programa,
        lambda: LoyaltyError(
            CodigoError.PROMO_NO_ENCONTRADA,
            f"promo_id: no existe la promoción {promo_id} en {shown(programa)}",
        ),
    )


def _require(
    conn: Connection,
    query: Select[Any],
    lock: bool,
    programa: str,
    missing: Callable[[], LoyaltyError],
) -> PromoRow:
    """The one row of `query` (FOR UPDATE with `lock`); when there is none, the program's
    not-found error if the program does not exist, else `missing()` (built only then)."""
    row = conn.execute(query.with_for_update() if lock else query).one_or_none()
    if row is None:
        require_program(conn, programa)
        raise missing()
    return row
