"""What the typed client's calls return: plain frozen values (no protobuf), built from the
answers' typed fields (`promo_detalle`, `resultados_detalle`: the server fills them for
native callers). Times are aware UTC datetimes, days are dates; a field the key may not
see (`nombre`, `correo` without fan:leer) is None."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(text)


@dataclass(frozen=True)
class Ping:
    integracion: str
    programa: str
    modo: str
    permisos: tuple[str, ...]
    hora: datetime


@dataclass(frozen=True)
class Fan:
    id: str
    nombre: str | None
    correo: str | None
    socio_desde: int
    temporadas: int
    puntos: int


@dataclass(frozen=True)
class CurrentPromo:
    nombre: str
    descripcion: str
    vigencia_fin: date
    codigo: str


@dataclass(frozen=True)
class ResolvedFan:
    fan: Fan
    promo: CurrentPromo | None


@dataclass(frozen=True)
class Sale:
    duplicado: bool
    tx: int
    # Credited by this call (0 on a duplicate).
    puntos_otorgados: int
    # Credited by the sale when it was applied, whichever call applied it.
    puntos_acreditados: int
    saldo: int
    fan_id: str
    correo: str | None


@dataclass(frozen=True)
class Redemption:
    codigo: str
    duplicado: bool
    promo: str
    correo: str | None
    # Credited by this call (0 on a duplicate).
    puntos_otorgados: int
    # Credited by the code's redemption when it was applied, whichever call applied it.
    puntos_acreditados: int


@dataclass(frozen=True)
class BatchEntry:
    """One code of a batch: its redemption, or the error that refused it."""

    codigo: str
    ok: bool
    redemption: Redemption | None
    error_codigo: str | None
    error_mensaje: str | None


@dataclass(frozen=True)
class Batch:
    recibidos: int
    canjeados: int
    duplicados: int
    rechazados: int
    resultados: tuple[BatchEntry, ...]


@dataclass(frozen=True)
class Inventory:
    disponibles: int
    asignados: int
    canjeados: int
    liberados: int


@dataclass(frozen=True)
class Promo:
    id: int
    nombre: str
    estado: str
    vigencia_fin: date
    admite_codigos: bool
    inventario: Inventory


@dataclass(frozen=True)
class Deposit:
    promo_id: int
    promo_nombre: str
    promo_estado: str
    recibidos: int
    agregados: int
    duplicados: int
    inventario: Inventory


@dataclass(frozen=True)
class RosterEntry:
    id: str
    nombre: str
    correo: str
    socio_desde: int
    puntos: int
    estado: str
    baja_en: datetime | None
    baja_motivo: str | None
    actualizado: datetime


@dataclass(frozen=True)
class RosterPage:
    desde: str
    fans: tuple[RosterEntry, ...]
    hay_mas: bool
    siguiente: str


# ---------------------------------------------------------------- from the answers


def ping_of(data: pb.PingData) -> Ping:
    return Ping(
        data.integracion, data.programa, data.modo, tuple(data.permisos), _moment(data.hora)
    )


def resolved_of(data: pb.ResolveFanData) -> ResolvedFan:
    fan = data.fan
    promo = data.promo_detalle if data.HasField("promo_detalle") else None
    return ResolvedFan(
        fan=Fan(
            id=fan.id,
            nombre=fan.nombre if fan.HasField("nombre") else None,
            correo=fan.correo if fan.HasField("correo") else None,
            socio_desde=fan.socio_desde,
            temporadas=fan.temporadas,
            puntos=fan.puntos,
        ),
        promo=None
        if promo is None
        else CurrentPromo(
            promo.nombre, promo.descripcion, date.fromisoformat(promo.vigencia_fin), promo.codigo
        ),
    )


def sale_of(data: pb.RegisterTxData) -> Sale:
    return Sale(
        duplicado=data.duplicado,
        tx=data.tx,
        puntos_otorgados=data.puntos_otorgados,
        puntos_acreditados=data.puntos_acreditados,
        saldo=data.saldo,
        fan_id=data.fan.id,
        correo=data.fan.correo if data.fan.HasField("correo") else None,
    )


def redemption_of(data: pb.RedeemData) -> Redemption:
    return Redemption(
        codigo=data.codigo,
        duplicado=data.duplicado,
        promo=data.promo,
        correo=data.fan.correo if data.fan.HasField("correo") else None,
        puntos_otorgados=data.puntos_otorgados,
        puntos_acreditados=data.puntos_acreditados,
    )


def batch_of(data: pb.RedeemData) -> Batch:
    if not data.HasField("resultados_detalle"):
        raise ValueError("the answer has no resultados_detalle (a call through the gateway?)")
    entries = tuple(
        BatchEntry(
            codigo=entry.codigo,
            ok=entry.ok,
            redemption=redemption_of(entry.canje) if entry.HasField("canje") else None,
            error_codigo=entry.error.codigo if entry.HasField("error") else None,
            error_mensaje=entry.error.mensaje if entry.HasField("error") else None,
        )
        for entry in data.resultados_detalle.resultados
    )
    r = data.resumen
    return Batch(r.recibidos, r.canjeados, r.duplicados, r.rechazados, entries)


def inventory_of(data: pb.Inventario) -> Inventory:
    return Inventory(data.disponibles, data.asignados, data.canjeados, data.liberados)


def promos_of(data: pb.ListPromosData) -> tuple[Promo, ...]:
    return tuple(
        Promo(
            id=p.id,
            nombre=p.nombre,
            estado=p.estado,
            vigencia_fin=date.fromisoformat(p.vigencia_fin),
            admite_codigos=p.admite_codigos,
            inventario=inventory_of(p.inventario),
        )
        for p in data.promos
    )


def deposit_of(data: pb.DepositCodesData) -> Deposit:
    return Deposit(
        promo_id=data.promo.id,
        promo_nombre=data.promo.nombre,
        promo_estado=data.promo.estado,
        recibidos=data.recibidos,
        agregados=data.agregados,
        duplicados=data.duplicados,
        inventario=inventory_of(data.inventario),
    )


def roster_of(data: pb.RosterData) -> RosterPage:
    return RosterPage(
        desde=data.desde,
        fans=tuple(
            RosterEntry(
                id=f.id,
                nombre=f.nombre,
                correo=f.correo,
                socio_desde=f.socio_desde,
                puntos=f.puntos,
                estado=f.estado,
                baja_en=_moment(f.baja.en) if f.HasField("baja") else None,
                baja_motivo=f.baja.motivo if f.HasField("baja") else None,
                actualizado=_moment(f.actualizado),
            )
            for f in data.fans
        ),
        hay_mas=data.hay_mas,
        siguiente=data.siguiente,
    )


__all__ = [
    "Batch",
    "BatchEntry",
    "CurrentPromo",
    "Deposit",
    "Fan",
    "Inventory",
    "Ping",
    "Promo",
    "Redemption",
    "ResolvedFan",
    "RosterEntry",
    "RosterPage",
    "Sale",
    "batch_of",
    "deposit_of",
    "inventory_of",
    "ping_of",
    "promos_of",
    "redemption_of",
    "resolved_of",
    "roster_of",
    "sale_of",
]
