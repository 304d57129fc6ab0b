"""Promotion, code and fan states, and the state changes the back office may make.

Pure rules: no I/O. The store keeps these values as plain text columns.
"""

from __future__ import annotations

import re
from datetime import date
from enum import StrEnum

from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.text import single_line

_FECHA = re.compile(r"\d{4}-\d{2}-\d{2}")
MAX_NOMBRE = 100
"""The longest promotion name (a POS names a promotion by it in `codes`, and every
`fan/resolve`, `promos` and `redeem` answer carries it)."""


def promo_name(text: str, campo: str = "nombre") -> str:
    """A promotion's name: one line (domain.text), at most MAX_NOMBRE characters."""
    return single_line(text, campo, max_length=MAX_NOMBRE)


class EstadoPromo(StrEnum):
    ACTIVA = "activa"
    PAUSADA = "pausada"
    TERMINADA = "terminada"


class EstadoCodigo(StrEnum):
    DISPONIBLE = "disponible"
    ASIGNADO = "asignado"
    CANJEADO = "canjeado"
    LIBERADO = "liberado"


class EstadoFan(StrEnum):
    ACTIVO = "activo"
    BAJA = "baja"


# Back-office state changes of a code: current state → states it may move to.
# `canjeado` is reached only by a POS redemption, never by the back office.
TRANSICIONES_CODIGO: dict[EstadoCodigo, frozenset[EstadoCodigo]] = {
    EstadoCodigo.DISPONIBLE: frozenset({EstadoCodigo.ASIGNADO, EstadoCodigo.LIBERADO}),
    EstadoCodigo.ASIGNADO: frozenset({EstadoCodigo.LIBERADO}),
    EstadoCodigo.CANJEADO: frozenset(),
    EstadoCodigo.LIBERADO: frozenset(),
}

# Back-office state changes of a promotion: `terminada` is final.
TRANSICIONES_PROMO: dict[EstadoPromo, frozenset[EstadoPromo]] = {
    EstadoPromo.ACTIVA: frozenset({EstadoPromo.PAUSADA, EstadoPromo.TERMINADA}),
    EstadoPromo.PAUSADA: frozenset({EstadoPromo.ACTIVA, EstadoPromo.TERMINADA}),
    EstadoPromo.TERMINADA: frozenset(),
}

# Back-office state changes of a fan: baja (with motivo) and reactivation.
TRANSICIONES_FAN: dict[EstadoFan, frozenset[EstadoFan]] = {
    EstadoFan.ACTIVO: frozenset({EstadoFan.BAJA}),
    EstadoFan.BAJA: frozenset({EstadoFan.ACTIVO}),
}


def parse_estado_promo(text: str, campo: str = "estado") -> EstadoPromo:
    """The promotion state named by `text` (trimmed, lower-cased)."""
    try:
        return EstadoPromo(text.strip().lower())
    except ValueError:
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA,
            f"{campo}: debe ser uno de {', '.join(e.value for e in EstadoPromo)}",
        ) from None


def parse_estado_codigo(text: str, campo: str = "estado") -> EstadoCodigo:
    """The code state named by `text` (trimmed, lower-cased)."""
    try:
        return EstadoCodigo(text.strip().lower())
    except ValueError:
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA,
            f"{campo}: debe ser uno de {', '.join(e.value for e in EstadoCodigo)}",
        ) from None


def parse_estado_fan(text: str, campo: str = "estado") -> EstadoFan:
    """The fan state named by `text` (trimmed, lower-cased)."""
    try:
        return EstadoFan(text.strip().lower())
    except ValueError:
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA,
            f"{campo}: debe ser uno de {', '.join(e.value for e in EstadoFan)}",
        ) from None


def check_transicion_codigo(codigo: str, actual: EstadoCodigo, nuevo: EstadoCodigo) -> None:
    """Raise transicion_invalida unless the back office may move a code from `actual` to
    `nuevo`. `codigo` is the code's text, named in the detalle."""
    if nuevo not in TRANSICIONES_CODIGO[actual]:
        raise LoyaltyError(
            CodigoError.TRANSICION_INVALIDA,
            f"codigo {shown(codigo)}: estado actual {actual.value}, no puede pasar a {nuevo.value}",
        )


def check_transicion_promo(nombre: str, actual: EstadoPromo, nuevo: EstadoPromo) -> None:
    """Raise transicion_invalida unless a promotion may move from `actual` to `nuevo`.
    Staying in the same state is allowed (a no-op)."""
    if nuevo != actual and nuevo not in TRANSICIONES_PROMO[actual]:
        raise LoyaltyError(
            CodigoError.TRANSICION_INVALIDA,
            f"promo {shown(nombre)}: estado actual {actual.value}, no puede pasar a {nuevo.value}",
        )


def check_transicion_fan(fan_id: str, actual: EstadoFan, nuevo: EstadoFan) -> None:
    """Raise transicion_invalida unless a fan may move from `actual` to `nuevo`."""
    if nuevo not in TRANSICIONES_FAN[actual]:
        raise LoyaltyError(
            CodigoError.TRANSICION_INVALIDA,
            f"fan {shown(fan_id)}: estado actual {actual.value}, no puede pasar a {nuevo.value}",
        )


def parse_fecha(text: str, campo: str = "vigencia_fin") -> date:
    """A calendar date written `YYYY-MM-DD`."""
    value = text.strip()
    if not value:
        raise LoyaltyError(CodigoError.CAMPO_REQUERIDO, f"{campo}: vacío")
    try:
        if not _FECHA.fullmatch(value):
            raise ValueError(value)
        return date.fromisoformat(value)
    except ValueError:
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA, f"{campo}: debe ser una fecha AAAA-MM-DD"
        ) from None


def check_puntos_canje(puntos: int, campo: str = "puntos_canje") -> int:
    """Points a live redemption credits: 0 or more."""
    if puntos < 0:
        raise LoyaltyError(CodigoError.SOLICITUD_INVALIDA, f"{campo}: no puede ser negativo")
    return puntos
