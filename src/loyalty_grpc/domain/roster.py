"""The roster's page size (`limite`), one rule for both bindings (GET query-string text,
POST JSON values): absent -> 500; above 2000 -> served as 2000; below 1, or not an
integer (a JSON number with an integral value, or its text of at most MAX_LIMITE_TEXTO
characters), -> solicitud_invalida."""

from __future__ import annotations

import re
from decimal import Decimal

from loyalty_grpc.domain.detalle import shown, shown_number, too_long
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.integers import integral
from loyalty_grpc.domain.json_value import JsonValue, json_type_name

LIMITE_DEFAULT = 500
LIMITE_MAX = 2000
MAX_LIMITE_TEXTO = 32
"""The longest `limite` text read (trimmed): more digits than any page size needs (over
LIMITE_MAX is served as LIMITE_MAX)."""
_INTEGER = re.compile(r"[+-]?[0-9]+(?:\.0*)?")


def limite_invalido(problema: str) -> LoyaltyError:
    return LoyaltyError(
        CodigoError.SOLICITUD_INVALIDA,
        f"limite: {problema}; debe ser un entero de 1 a {LIMITE_MAX} "
        f"(por omisión {LIMITE_DEFAULT})",
    )


def parse_limite(value: JsonValue) -> int:
    """The page size: None -> the default; over the maximum -> the maximum."""
    if value is None:
        return LIMITE_DEFAULT
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise limite_invalido(f"llegó {json_type_name(value)}")
    if isinstance(value, str):
        text = value.strip()
        mostrado = shown(text)
        if len(text) > MAX_LIMITE_TEXTO:
            raise limite_invalido(too_long(len(text), MAX_LIMITE_TEXTO))
        if not _INTEGER.fullmatch(text):
            raise limite_invalido(f"{mostrado} no es un número entero")
        number = int(Decimal(text))
    else:
        mostrado = shown_number(value)
        whole = integral(value)
        if whole is None:
            raise limite_invalido(f"{mostrado} no es un número entero")
        number = whole
    if number < 1:
        raise limite_invalido(f"{mostrado} es menor que 1")
    return min(number, LIMITE_MAX)


__all__ = ["LIMITE_DEFAULT", "LIMITE_MAX", "MAX_LIMITE_TEXTO", "limite_invalido", "parse_limite"]
