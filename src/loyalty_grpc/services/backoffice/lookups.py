"""Lookups the back-office use cases share: a program, a fan, a promotion of a program,
each locked or not, each with its not-found error; a list as one query parameter."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Row, Text, literal, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql.elements import ColumnElement

from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.store.tables import fans, programas, promos
from loyalty_grpc.store.uow import UnitOfWork


def require_program(uow: UnitOfWork, programa: str) -> None:
    """programa_no_encontrado unless the program exists (locked against a concurrent
    change of its row until the transaction ends: KEY SHARE, so it blocks nobody else)."""
    conn = uow.conn
    found = conn.execute(
        select(programas.c.id).where(programas.c.id == programa).with_for_update(key_share=True)
    ).scalar_one_or_none()
    if found is None:
        raise LoyaltyError(
            CodigoError.PROGRAMA_NO_ENCONTRADO, f"programa: no existe {shown(programa)}"
        )


def require_fan(
    uow: UnitOfWork, programa: str, fan_id: str, *, lock: bool = False
) -> Row[*tuple[Any, ...]]:
    """The fan's row (any state), or fan_no_encontrado; the program must exist."""
    conn = uow.conn
    query = select(fans).where(fans.c.programa_id == programa, fans.c.fan_id == fan_id)
    if lock:
        query = query.with_for_update()
    row = conn.execute(query).one_or_none()
    if row is None:
        require_program(uow, programa)
        raise LoyaltyError(
            CodigoError.FAN_NO_ENCONTRADO, f"fan: no existe {shown(fan_id)} en {shown(programa)}"
        )
    return row


def require_promo(
    uow: UnitOfWork, programa: str, promo_id: int, *, lock: bool = False
) -> Row[*tuple[Any, ...]]:
    """The promotion's row, or promo_no_encontrada; the program must exist."""
    conn = uow.conn
    query = select(promos).where(promos.c.programa_id == programa, promos.c.id == promo_id)
    if lock:
        query = query.with_for_update()
    row = conn.execute(query).one_or_none()
    if row is None:
        require_program(uow, programa)
        raise LoyaltyError(
            CodigoError.PROMO_NO_ENCONTRADA,
            f"promo_id: no existe la promoción {promo_id} en {shown(programa)}",
        )
    return row


def text_array(values: Iterable[str]) -> ColumnElement[Any]:
    """A list as one array parameter (`= ANY(:array)`), however long it is."""
    return literal(list(values), ARRAY(Text))
