"""Coupon codes: depositing codes into a promotion's inventory (the promotion held FOR
SHARE, the new codes inserted in one statement) and the back office's changes of one
code's state (the code's row locked FOR UPDATE, or the next available one picked FOR
UPDATE SKIP LOCKED).

A deposit is idempotent per (promotion, code): one set-based statement, ``INSERT … SELECT
unnest(:codes) ORDER BY codigo ON CONFLICT (programa_id, promo_id, codigo) DO NOTHING``, so
resending a batch adds nothing and concurrent overlapping deposits count each code once (a
conflicting insert waits for the other transaction and then counts the code as a duplicate).
Inserting in code order means two concurrent deposits take their row locks in the same order
and cannot deadlock. Deposited codes start `disponible`. Every statement names the program:
a code is found by (programa_id, id) or (programa_id, promo_id, …), its fan by (programa_id,
pk)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, Select, Text, func, literal, select, update

from loyalty_grpc.domain.promos import EstadoCodigo, EstadoPromo
from loyalty_grpc.store.tables import codigos, fans, promos


@dataclass(frozen=True)
class PromoResumen:
    id: int
    nombre: str
    estado: EstadoPromo


@dataclass(frozen=True)
class LockedCode:
    """A code's row, locked FOR UPDATE until the end of the transaction."""

    id: int
    estado: EstadoCodigo


@dataclass(frozen=True)
class CodigoInfo:
    promo_id: int
    codigo: str
    estado: EstadoCodigo
    # Fan ID the code was delivered to; None when never delivered.
    fan: str | None


def _promo_for_share(programa: str) -> Select[*tuple[Any, ...]]:
    return (
        select(promos.c.id, promos.c.nombre, promos.c.estado)
        .where(promos.c.programa_id == programa)
        .with_for_update(read=True)
    )


def _resumen(row: Row[*tuple[Any, ...]] | None) -> PromoResumen | None:
    if row is None:
        return None
    return PromoResumen(id=row.id, nombre=row.nombre, estado=EstadoPromo(row.estado))


def promo_by_id_for_share(conn: Connection, programa: str, promo_id: int) -> PromoResumen | None:
    """The program's promotion `promo_id`, held FOR SHARE until the end of the transaction
    (so that it cannot end, `terminada`, halfway through a deposit); None when none."""
    row = conn.execute(_promo_for_share(programa).where(promos.c.id == promo_id)).one_or_none()
    return _resumen(row)


def promo_by_name_for_share(conn: Connection, programa: str, nombre: str) -> PromoResumen | None:
    """The program's promotion named `nombre` (case-insensitive, as the unique index
    uq_promos_programa_nombre), held FOR SHARE like `promo_by_id_for_share`."""
    row = conn.execute(
        _promo_for_share(programa).where(
            func.lower(promos.c.nombre) == func.lower(literal(nombre, Text))
        )
    ).one_or_none()
    return _resumen(row)


# The deposit's insert is the function `loyalty_codes_deposit` (migration 0014): an INSERT …
# SELECT from an array is not router-planned by Citus, the function runs on the node of
# the program's shard (registered with force_delegation: it runs inside the deposit's
# unit of work, after the promotion's FOR SHARE).
DEPOSIT = """
SELECT * FROM loyalty_codes_deposit(%(programa)s, CAST(%(promo_id)s AS integer),
                                    CAST(%(codes)s AS text[]))
"""


def insert_new_codes(conn: Connection, programa: str, promo_id: int, codes: Sequence[str]) -> int:
    """Insert the codes the promotion lacks, `disponible`, in code order; how many went in.
    One call."""
    added = conn.exec_driver_sql(
        DEPOSIT, {"programa": programa, "promo_id": promo_id, "codes": list(codes)}
    ).scalar_one()
    return int(added)


def lock_code(conn: Connection, programa: str, promo_id: int, codigo: str) -> LockedCode | None:
    """The program's promotion's code `codigo`, locked FOR UPDATE (a concurrent POS
    redemption of it waits, then sees the new state); None when the promotion has no such
    code."""
    row = conn.execute(
        select(codigos.c.id, codigos.c.estado)
        .where(
            codigos.c.programa_id == programa,
            codigos.c.promo_id == promo_id,
            codigos.c.codigo == codigo,
        )
        .with_for_update()
    ).one_or_none()
    return None if row is None else LockedCode(id=row.id, estado=EstadoCodigo(row.estado))


def lock_next_available(conn: Connection, programa: str, promo_id: int) -> int | None:
    """The row id of the program's promotion's oldest `disponible` code (lowest id: deposit order),
    locked FOR UPDATE SKIP LOCKED, so concurrent callers each get a different code and
    never wait for one another; None when none is left."""
    found: int | None = conn.execute(
        select(codigos.c.id)
        .where(
            codigos.c.programa_id == programa,
            codigos.c.promo_id == promo_id,
            codigos.c.estado == EstadoCodigo.DISPONIBLE.value,
        )
        .order_by(codigos.c.id)
        .limit(1)
        .with_for_update(skip_locked=True)
    ).scalar_one_or_none()
    return found


def mark_assigned(conn: Connection, programa: str, code_pk: int, fan_pk: int) -> None:
    """The program's code → asignado to the program's fan, now."""
    conn.execute(
        update(codigos)
        .where(codigos.c.programa_id == programa, codigos.c.id == code_pk)
        .values(estado=EstadoCodigo.ASIGNADO.value, fan_pk=fan_pk, asignado_en=func.now())
    )


def mark_released(conn: Connection, programa: str, code_pk: int) -> None:
    """The program's code → liberado, now (a delivered code keeps its fan)."""
    conn.execute(
        update(codigos)
        .where(codigos.c.programa_id == programa, codigos.c.id == code_pk)
        .values(estado=EstadoCodigo.LIBERADO.value, liberado_en=func.now())
    )


def code_info(conn: Connection, programa: str, code_pk: int) -> CodigoInfo:
    """The program's code as the back office shows it, with the Fan ID it was delivered
    to."""
    row = conn.execute(
        select(codigos.c.promo_id, codigos.c.codigo, codigos.c.estado, fans.c.fan_id)
        .outerjoin(
            fans, (fans.c.programa_id == codigos.c.programa_id) & (fans.c.pk == codigos.c.fan_pk)
        )
        .where(codigos.c.programa_id == programa, codigos.c.id == code_pk)
    ).one()
    return CodigoInfo(
        promo_id=row.promo_id, codigo=row.codigo, estado=EstadoCodigo(row.estado), fan=row.fan_id
    )
