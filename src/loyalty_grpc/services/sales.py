"""`tx`: register a closed sale and credit its points, exactly once per `id_externo`.

One transaction: the sale, its ledger entry, the new balance (and, through the ledger, the
wallet-pass outbox row). Idempotency rests on the unique (program, mode, id_externo) index:
`INSERT … ON CONFLICT DO NOTHING` makes a concurrent identical call wait for the first to
commit and then see it, so 50 identical calls credit once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import Connection, Engine, select
from sqlalchemy.dialects.postgresql import insert

from loyalty_grpc.domain.amounts import points_for
from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.errors import Codigo, LoyaltyError
from loyalty_grpc.domain.fan_ref import FanRef
from loyalty_grpc.domain.keys import Modo
from loyalty_grpc.services.fan_lookup import FoundFan, find_fan
from loyalty_grpc.store.ledger import Motivo, move_points
from loyalty_grpc.store.tables import fans, programas, ventas
from loyalty_grpc.store.uow import UnitOfWork

# Responses carry points as int32 (DESIGN.md §3).
MAX_PUNTOS = 2**31 - 1


@dataclass(frozen=True)
class NewSale:
    id_externo: str
    fan: FanRef
    centavos: int
    moneda: str
    ts: datetime
    terminal: str | None = None
    sitio: str | None = None


@dataclass(frozen=True)
class SaleResult:
    duplicado: bool
    folio: int
    puntos_otorgados: int
    saldo: int
    fan_id: str
    correo: str


def _program_terms(conn: Connection, programa: str) -> tuple[Decimal, str]:
    row = conn.execute(select(programas.c.tasa_puntos, programas.c.moneda)
                       .where(programas.c.id == programa)).one()
    return Decimal(row.tasa_puntos), str(row.moneda)


def _points(caller: Caller, centavos: int, tasa: Decimal) -> int:
    if caller.modo is not Modo.VIVO:
        return 0
    puntos = points_for(centavos, tasa)
    if puntos > MAX_PUNTOS:
        raise LoyaltyError(Codigo.IMPORTE_INVALIDO,
                           "importe: demasiado grande para los puntos de este programa")
    return puntos


def _replay(conn: Connection, caller: Caller, sale: NewSale, fan: FoundFan) -> SaleResult:
    """The answer to an id_externo seen before: the original folio, no points, today's
    balance; or id_externo_en_conflicto when the fan or the amount differ."""
    original = conn.execute(
        select(ventas.c.id, ventas.c.fan_pk, ventas.c.importe_centavos).where(
            ventas.c.programa_id == caller.programa_id, ventas.c.modo == caller.modo.value,
            ventas.c.id_externo == sale.id_externo)
    ).one()
    if original.fan_pk != fan.pk or original.importe_centavos != sale.centavos:
        differs = "el fan" if original.fan_pk != fan.pk else "el importe"
        raise LoyaltyError(Codigo.ID_EXTERNO_EN_CONFLICTO,
                           f"id_externo ya registrado (folio {original.id}) con otro valor en "
                           f"{differs}; use un id_externo nuevo para otra venta")
    saldo = conn.execute(select(fans.c.puntos).where(fans.c.pk == fan.pk)).scalar_one()
    return SaleResult(duplicado=True, folio=original.id, puntos_otorgados=0, saldo=int(saldo),
                      fan_id=fan.fan_id, correo=fan.correo)


def register_sale(engine: Engine, caller: Caller, sale: NewSale) -> SaleResult:
    with UnitOfWork(engine) as uow:
        conn = uow.conn
        tasa, moneda = _program_terms(conn, caller.programa_id)
        if sale.moneda.upper() != moneda:
            raise LoyaltyError(Codigo.MONEDA_NO_SOPORTADA,
                               f"moneda: el programa opera en {moneda}, llegó {sale.moneda!r}")
        fan = find_fan(conn, caller.programa_id, sale.fan)
        puntos = _points(caller, sale.centavos, tasa)
        folio = conn.execute(
            insert(ventas).values(
                programa_id=caller.programa_id, modo=caller.modo.value,
                id_externo=sale.id_externo, fan_pk=fan.pk, importe_centavos=sale.centavos,
                moneda=moneda, terminal=sale.terminal, sitio=sale.sitio, ts=sale.ts,
                puntos=puntos, clave_id=caller.clave_id)
            .on_conflict_do_nothing(index_elements=["programa_id", "modo", "id_externo"])
            .returning(ventas.c.id)
        ).scalar_one_or_none()
        if folio is None:
            return _replay(conn, caller, sale, fan)
        saldo = move_points(conn, fan.pk, puntos, Motivo.VENTA, venta_id=folio)
        uow.commit()
    return SaleResult(duplicado=False, folio=folio, puntos_otorgados=puntos, saldo=saldo,
                      fan_id=fan.fan_id, correo=fan.correo)
