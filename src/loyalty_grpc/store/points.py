"""The support desk's reads and writes around points: a fan's ledger (each entry with the
balance after it), and a sale as voiding it needs it (locked, marked voided, what the
ledger says it credited). The points themselves move only through store/ledger.py.

Apart from store/ledger.py, which holds the one rule by which points move (fixed SQL text
shared with the hot paths' single statements), these are the back office's own
SQLAlchemy Core statements. Each names the program: a fan's entries by (programa_id,
fan_pk), a sale by (programa_id, id), every join on (programa_id, key)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Connection, Row, Select, cast, func, select, update

from loyalty_grpc.domain.keys import Modo
from loyalty_grpc.store.ledger import Motivo
from loyalty_grpc.store.tables import codigos, fans, movimientos, ventas


@dataclass(frozen=True)
class LedgerEntryInfo:
    id: int
    puntos: int
    motivo: Motivo
    # The sale's folio (venta, anulacion); None otherwise.
    venta_id: int | None
    # The coupon code redeemed (canje); None otherwise.
    codigo: str | None
    nota: str
    creado: datetime
    # The fan's balance after this entry.
    saldo: int


@dataclass(frozen=True)
class SaleInfo:
    folio: int
    programa: str
    modo: Modo
    id_externo: str
    # Fan ID.
    fan: str
    importe_centavos: int
    moneda: str
    terminal: str | None
    sitio: str | None
    ts: datetime
    puntos: int
    creado: datetime
    # None while the sale stands.
    anulada_en: datetime | None


@dataclass(frozen=True)
class SaleRow:
    """A sale and the internal key of its fan (whose ledger a void writes to)."""

    fan_pk: int
    info: SaleInfo


# ------------------------------------------------------------------ ledger


def _ledger_query(programa: str, fan_pk: int) -> Select[Any]:
    """The program's fan's entries, oldest first, each with the balance after it (a window
    sum). Oldest is by (creado, id), as CREDITED's latest (store/redeem.py): on a cluster
    ids are unique but do not grow within a program (each node hands out a range of its
    own, and a program's shard may move to another node), so the entry's time orders
    first and the id only among one transaction's entries (the same `creado`, one node).
    Entries of transactions that overlap are by their transactions' start; the last
    entry's balance is the fan's whatever the order."""
    m = movimientos.c
    saldo = cast(func.sum(m.puntos).over(order_by=(m.creado, m.id)), BigInteger)
    return (
        select(
            m.id,
            m.puntos,
            m.motivo,
            m.venta_id,
            codigos.c.codigo,
            m.nota,
            m.creado,
            saldo.label("saldo"),
        )
        .select_from(
            movimientos.outerjoin(
                codigos, (codigos.c.programa_id == m.programa_id) & (codigos.c.id == m.codigo_id)
            )
        )
        .where(m.programa_id == programa, m.fan_pk == fan_pk)
        .order_by(m.creado, m.id)
    )


def _entry(row: Row[*tuple[Any, ...]]) -> LedgerEntryInfo:
    return LedgerEntryInfo(
        id=row.id,
        puntos=row.puntos,
        motivo=Motivo(row.motivo),
        venta_id=row.venta_id,
        codigo=row.codigo,
        nota=row.nota,
        creado=row.creado,
        saldo=row.saldo,
    )


def ledger(conn: Connection, programa: str, fan_pk: int) -> list[LedgerEntryInfo]:
    """The program's fan's entries, oldest first; the last one's `saldo` is the balance as
    `conn`'s snapshot sees it."""
    return [_entry(r) for r in conn.execute(_ledger_query(programa, fan_pk))]


def last_entry(conn: Connection, programa: str, fan_pk: int) -> LedgerEntryInfo:
    """The program's fan's newest entry by (creado, id), with the balance after it (the fan
    has one). In a transaction that locked the fan and then moved its points, the entry it
    wrote; the one exception, an entry of a transaction that began after this one and
    locked the fan first, can only come in the moment between this one's BEGIN and its
    lock of the fan, which are sent together."""
    entries = _ledger_query(programa, fan_pk).subquery()
    newest = select(entries).order_by(entries.c.creado.desc(), entries.c.id.desc()).limit(1)
    return _entry(conn.execute(newest).one())


# ------------------------------------------------------------------ sales


def _sale_info(row: Row[*tuple[Any, ...]]) -> SaleInfo:
    return SaleInfo(
        folio=row.id,
        programa=row.programa_id,
        modo=Modo(row.modo),
        id_externo=row.id_externo,
        fan=row.fan_id,
        importe_centavos=row.importe_centavos,
        moneda=row.moneda,
        terminal=row.terminal,
        sitio=row.sitio,
        ts=row.ts,
        puntos=row.puntos,
        creado=row.creado,
        anulada_en=row.anulada_en,
    )


def lock_sale(conn: Connection, programa: str, folio: int) -> SaleRow | None:
    """The program's sale `folio` with its row locked (FOR UPDATE, the sale's row only), so
    that concurrent voids of one sale take turns; None when there is none."""
    row = conn.execute(
        select(ventas, fans.c.fan_id)
        .join(fans, (fans.c.programa_id == ventas.c.programa_id) & (fans.c.pk == ventas.c.fan_pk))
        .where(ventas.c.programa_id == programa, ventas.c.id == folio)
        .with_for_update(of=ventas)
    ).one_or_none()
    return None if row is None else SaleRow(fan_pk=row.fan_pk, info=_sale_info(row))


def mark_voided(conn: Connection, programa: str, folio: int) -> datetime:
    """Set the program's sale's `anulada_en` to now (nothing else of it changes); returns
    it."""
    anulada_en: datetime = conn.execute(
        update(ventas)
        .where(ventas.c.programa_id == programa, ventas.c.id == folio)
        .values(anulada_en=func.now())
        .returning(ventas.c.anulada_en)
    ).scalar_one()
    return anulada_en


def credited(conn: Connection, programa: str, folio: int, fan_pk: int) -> int:
    """What the ledger says the program's sale credited the fan: the sum of the entries
    that name it (0 when there are none)."""
    return int(
        conn.execute(
            select(func.coalesce(func.sum(movimientos.c.puntos), 0)).where(
                movimientos.c.programa_id == programa,
                movimientos.c.fan_pk == fan_pk,
                movimientos.c.venta_id == folio,
            )
        ).scalar_one()
    )
