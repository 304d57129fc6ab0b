"""Loyalty program settings: id, points rate, QR URL, currency. Pure, no I/O."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from loyalty_grpc.domain.ascii import ascii_upper
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.text import matching

_PROGRAMA_ID = re.compile(r"[a-z0-9][a-z0-9_-]*")
_MONEDA = re.compile(r"[A-Z]{3}")
# The store keeps the rate as Numeric(12, 6).
TASA_MAX = Decimal(1_000_000)
TASA_STEP = Decimal("0.000001")
MONEDA_POR_OMISION = "MXN"


def program_id(text: str, campo: str = "id") -> str:
    """A program's natural key: lower-case letters, digits, `-` and `_` (trimmed)."""
    return matching(text, _PROGRAMA_ID, campo, "minúsculas, dígitos, '-' y '_'")


def parse_tasa(text: str, campo: str = "tasa_puntos") -> Decimal:
    """Points per peso as an exact decimal string ("0.1"): 0 or more, below 1,000,000,
    at most 6 decimals. Never a float."""
    value = text.strip()
    if not value:
        raise LoyaltyError(CodigoError.CAMPO_REQUERIDO, f"{campo}: vacío")
    try:
        tasa = Decimal(value)
    except InvalidOperation:
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA, f"{campo}: no es un número decimal"
        ) from None
    if not tasa.is_finite() or tasa < 0 or tasa >= TASA_MAX:
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA, f"{campo}: debe ser 0 o más y menor que {TASA_MAX}"
        )
    if tasa != tasa.quantize(TASA_STEP):
        raise LoyaltyError(CodigoError.SOLICITUD_INVALIDA, f"{campo}: a lo más 6 decimales")
    return tasa


def format_tasa(tasa: Decimal) -> str:
    """The rate as plain decimal text without trailing zeros: Decimal("0.100000") → "0.1"."""
    text = format(tasa.normalize(), "f")
    return text if text != "-0" else "0"


def check_qr_url(text: str, campo: str = "qr_url") -> str:
    """Empty, or an http(s) URL (trimmed)."""
    value = text.strip()
    if value and (not value.startswith(("https://", "http://")) or any(c.isspace() for c in value)):
        raise LoyaltyError(CodigoError.SOLICITUD_INVALIDA, f"{campo}: debe ser una URL http(s)://")
    return value


def check_moneda(text: str, campo: str = "moneda") -> str:
    """A three-letter currency code (ASCII letters), upper-cased; empty →
    MONEDA_POR_OMISION."""
    value = ascii_upper(text.strip()) or MONEDA_POR_OMISION
    if not _MONEDA.fullmatch(value):
        raise LoyaltyError(CodigoError.SOLICITUD_INVALIDA, f"{campo}: tres letras, p. ej. MXN")
    return value
