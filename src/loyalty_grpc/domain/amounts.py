"""Amounts as the contract accepts them, and the points they earn (DESIGN.md §2 "Amounts
and points"). Pure, no I/O. Money is integer cents end to end; no float arithmetic.

`importe` (pesos):
- JSON number. A JSON integer is pesos. A JSON decimal arrives as a float and is read
  through its shortest decimal text (`repr`, exactly what the client sent for any number
  with up to 15 significant digits), then rounded to the cent when it lies less than
  0.000001 pesos (RUIDO_MAXIMO_CENTAVOS = 0.0001 cents) from one: `30.000000000000004` and
  `0.1 + 0.2` are float noise; `12.345` has a real third decimal and is rejected.
- Text, trimmed: an optional leading `$`, `MX$` or `MXN` (any case) and/or a trailing
  `MXN`, with or without spaces between it and the number (ESPACIOS: the space, the
  no-break space U+00A0 and the narrow no-break space U+202F, which locale formatters
  write there, e.g. "1234,56\u00a0MXN"; any other whitespace there is rejected like a
  space inside the number); then digits with `,` and `.`:
  - both present: the last one is the decimal separator (1–2 digits after it) and may
    appear once; the other one separates thousands;
  - one kind only: repeated, or once and followed by exactly 3 digits → thousands;
    once and followed by 1–2 digits → decimal; anything else is rejected;
  - thousands groups: the first 1–3 digits without a leading zero, the others exactly 3
    (so "0,123" is neither 123 pesos nor 0.123: rejected);
  - a separator needs digits on both sides (".5" and "5." are rejected);
  - no sign: "-5" is negative (rejected), "+5" is rejected; no spaces inside.
  - zero with a minus sign ("-0", "$-0.00", the JSON number -0 or -0.0) is zero: it is not
    negative, so it is accepted as 0 like "0".
  A rejected text that looks like a number gets its plausible readings in `detalle`
  (every separator as thousands; the last one as the decimal point, rounded to the cent):
  `importe: "1.2345" no es un importe: tras "." hay 4 dígitos …; ¿1.23? ¿12345?`.
- 0 is accepted (a sale of 0 earns 0 points); the maximum is MAX_CENTAVOS (10,000,000.00
  pesos, which also fits an int32). Booleans, null, lists, objects, NaN/∞, negatives, more
  than 2 decimals, empty text and text over MAX_TEXTO characters are `importe_invalido`.

`importe_centavos` (cents): a JSON number with an integral value, in [0, MAX_CENTAVOS]
(the contract: "integer number of cents"; text, even of digits, is `importe_invalido`).
"""

from __future__ import annotations

import math
import re
from decimal import (
    ROUND_HALF_EVEN,
    ROUND_HALF_UP,
    Context,
    Decimal,
    DivisionByZero,
    InvalidOperation,
    Overflow,
)

from loyalty_grpc.domain.detalle import shown, shown_number, too_long
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.integers import integral
from loyalty_grpc.domain.json_value import JsonValue, json_type_name
from loyalty_grpc.domain.programs import MONEDA_POR_OMISION

MAX_CENTAVOS = 1_000_000_000
"""10,000,000.00 pesos: the largest amount of one sale (fits an int32)."""
MAX_TEXTO = 64
"""Longest amount text read (after trimming); longer is rejected without parsing."""
RUIDO_MAXIMO_CENTAVOS = Decimal("0.0001")
"""A JSON decimal closer than this to a whole cent (0.000001 pesos) is float noise."""

# Exact for every value we handle (≤ 64 digits of text, ≤ 17 digits of a float's repr);
# any inexact or invalid operation would be a bug, so it traps.
_CTX = Context(
    prec=100, rounding=ROUND_HALF_EVEN, traps=[InvalidOperation, DivisionByZero, Overflow]
)
_CIEN = Decimal(100)

ESPACIOS = " \u00a0\u202f"
"""What may separate the currency from the number (and a sign from either): the space, the
no-break space and the narrow no-break space (locale formatters write the last two)."""
_E = f"[{ESPACIOS}]*"
# What may stand for the peso before the number (any case), and after it: the currency
# of the programs (domain/programs.py).
DELANTE = ("$", "MX$", MONEDA_POR_OMISION)
DETRAS = (MONEDA_POR_OMISION,)
# As alternatives of a pattern, the longest first.
_DELANTE = "|".join(re.escape(s) for s in sorted(DELANTE, key=len, reverse=True))
_DETRAS = "|".join(re.escape(s) for s in sorted(DETRAS, key=len, reverse=True))
_SHAPE = re.compile(
    rf"(?P<signo1>[-+]?){_E}(?P<moneda>{_DELANTE})?{_E}(?P<signo2>[-+]?){_E}"
    rf"(?P<numero>[0-9.,]+){_E}(?P<sufijo>{_DETRAS})?",
    re.IGNORECASE,
)
_PREFIX = re.compile(rf"^{_E}(?:{_DELANTE}){_E}", re.IGNORECASE)
_SUFFIX = re.compile(rf"{_E}(?:{_DETRAS}){_E}$", re.IGNORECASE)
_LOOKS_NUMERIC = re.compile(r"[0-9.,\s']*[0-9][0-9.,\s']*")
# Another currency (letters or a symbol) before or after a number: "USD 100", "€5", "5 pesos".
_OTHER_CURRENCY = re.compile(
    r"(?:[^\W\d_]{1,4}\$?|[^\w\s.,'+\-])\s*[-+]?[0-9][0-9.,\s']*"
    r"|[-+]?[0-9][0-9.,\s']*?\s*(?:[^\W\d_]{1,6}|[^\w\s.,'+\-])"
)
_EXAMPLES = f'1234.56, "1,234.56", "1.234,56", "{DELANTE[0]} 1,234.56", "{DETRAS[0]} 99.90"'


class _NoEsImporteError(Exception):
    """Internal: the number text breaks a rule; `motivo` says which."""

    def __init__(self, motivo: str) -> None:
        super().__init__(motivo)
        self.motivo = motivo


def _error(campo: str, problema: str) -> LoyaltyError:
    return LoyaltyError(CodigoError.IMPORTE_INVALIDO, f"{campo}: {problema}")


def _as_pesos(centavos: int) -> str:
    """Canonical pesos for `detalle`: 123456 → "1234.56", 1200 → "12"."""
    enteros, resto = divmod(centavos, 100)
    return str(enteros) if resto == 0 else f"{enteros}.{resto:02d}"


def _over_max(campo: str, shown_as: str) -> LoyaltyError:
    return _error(
        campo,
        f"{shown_as} excede el máximo de {_as_pesos(MAX_CENTAVOS)}.00 pesos "
        f"({MAX_CENTAVOS} centavos)",
    )


def _wrong_type(campo: str, value: JsonValue, que: str) -> LoyaltyError:
    return _error(campo, f"debe ser {que}; llegó {json_type_name(value)}")


# ---------------------------------------------------------------- importe (pesos)


def parse_importe(value: JsonValue, campo: str = "importe") -> int:
    """The amount in pesos as the client sent it → integer cents in [0, MAX_CENTAVOS].
    Anything else raises `LoyaltyError(IMPORTE_INVALIDO)` with `detalle` naming `campo`."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _wrong_type(campo, value, "un número o un texto con el importe en pesos")
    if isinstance(value, int):
        if value < 0:
            raise _error(campo, f"{value} es negativo")
        if value > MAX_CENTAVOS // 100:
            raise _over_max(campo, str(value))
        return value * 100
    if isinstance(value, float):
        return _from_number(value, campo)
    return _from_text(value, campo)


def _from_number(numero: float, campo: str) -> int:
    if not math.isfinite(numero):
        raise _error(campo, f"{shown_number(numero)} no es un número finito")
    exacto = Decimal(repr(numero))  # the shortest text that reads back as this float
    if exacto < 0:
        raise _error(campo, f"{shown_number(numero)} es negativo")
    if exacto > MAX_CENTAVOS // 100 + 1:
        raise _over_max(campo, shown_number(numero))
    en_centavos = _CTX.multiply(exacto, _CIEN)
    centavos = en_centavos.to_integral_value(rounding=ROUND_HALF_EVEN, context=_CTX)
    if abs(_CTX.subtract(en_centavos, centavos)) >= RUIDO_MAXIMO_CENTAVOS:
        raise _error(campo, f"{shown_number(numero)} tiene más de 2 decimales")
    if centavos > MAX_CENTAVOS:
        raise _over_max(campo, shown_number(numero))
    return int(centavos)


def _from_text(original: str, campo: str) -> int:
    texto = original.strip()
    if not texto:
        raise _error(campo, "está vacío")
    if len(texto) > MAX_TEXTO:
        raise _error(campo, too_long(len(texto), MAX_TEXTO))
    forma = _SHAPE.fullmatch(texto)
    if forma is None:
        raise _ilegible(texto, campo)
    if forma["signo1"] and forma["signo2"]:
        raise _error(campo, f"{shown(texto)} no es un importe: lleva dos signos")
    signo = forma["signo1"] or forma["signo2"]
    numero = forma["numero"]
    try:
        centavos = _body(numero)
    except _NoEsImporteError as mal:
        if signo == "-":
            raise _error(campo, f"{shown(texto)} es negativo") from None
        raise _error(
            campo, f"{shown(texto)} no es un importe: {mal.motivo}{_readings_text(numero)}"
        ) from None
    if signo == "-" and centavos > 0:
        raise _error(campo, f"{shown(texto)} es negativo")
    if signo == "+":
        raise _error(
            campo, f'{shown(texto)} no es un importe: no lleva signo "+"; ¿{_as_pesos(centavos)}?'
        )
    if centavos > MAX_CENTAVOS:
        raise _over_max(campo, shown(texto))
    return centavos


def _body(numero: str) -> int:
    """Cents of a text of digits, `,` and `.` by the separator rules (module docstring)."""
    separadores = [c for c in numero if c in ".,"]
    if not separadores:
        return int(numero) * 100
    grupos = re.split(r"[.,]", numero)
    if "" in grupos:
        raise _NoEsImporteError("un separador necesita dígitos a ambos lados")
    ultimo = separadores[-1]
    if len(set(separadores)) == 2:
        if separadores.count(ultimo) > 1:
            raise _NoEsImporteError(
                f'con "," y "." el último ("{ultimo}") es el separador '
                "decimal y solo puede aparecer una vez"
            )
        if len(grupos[-1]) > 2:
            raise _NoEsImporteError(
                f'tras el separador decimal "{ultimo}" hay '
                f"{len(grupos[-1])} dígitos (máximo 2 decimales)"
            )
        _thousands(grupos[:-1])
        return _to_centavos(grupos[:-1], grupos[-1])
    if len(separadores) > 1:
        _thousands(grupos, f'"{ultimo}" repetido separa miles')
        return _to_centavos(grupos, "")
    despues = grupos[1]
    if len(despues) == 3:
        _thousands(grupos, f'"{ultimo}" seguido de 3 dígitos separa miles')
        return _to_centavos(grupos, "")
    if len(despues) <= 2:
        return _to_centavos(grupos[:1], despues)
    raise _NoEsImporteError(
        f'tras "{ultimo}" hay {len(despues)} dígitos (1 o 2 son decimales; 3, miles)'
    )


def _thousands(grupos: list[str], como: str = "") -> None:
    primero, resto = grupos[0], grupos[1:]
    if 1 <= len(primero) <= 3 and not primero.startswith("0") and all(len(g) == 3 for g in resto):
        return
    regla = "los grupos de miles son de 3 dígitos (el primero de 1 a 3, sin cero inicial)"
    raise _NoEsImporteError(f"{como}, pero {regla}" if como else regla)


def _to_centavos(enteros: list[str], decimales: str) -> int:
    return int("".join(enteros)) * 100 + int(decimales.ljust(2, "0"))


def _readings(numero: str) -> list[int]:
    """Plausible cents of a malformed number: the last separator as the decimal point
    (rounded to the cent), and every separator as thousands. Within the bounds, unique."""
    if _LOOKS_NUMERIC.fullmatch(numero) is None:
        return []
    readings: list[int] = []
    ultimo = max(numero.rfind("."), numero.rfind(","))
    if ultimo >= 0:
        enteros = re.sub(r"[^0-9]", "", numero[:ultimo]) or "0"
        decimales = re.sub(r"[^0-9]", "", numero[ultimo + 1 :])
        if decimales:
            valor = _CTX.multiply(Decimal(f"{enteros}.{decimales}"), _CIEN)
            readings.append(int(valor.to_integral_value(rounding=ROUND_HALF_UP, context=_CTX)))
    readings.append(int(re.sub(r"[^0-9]", "", numero)) * 100)
    return [c for i, c in enumerate(readings) if c <= MAX_CENTAVOS and c not in readings[:i]]


def _readings_text(numero: str) -> str:
    readings = _readings(numero)
    return "; " + " ".join(f"¿{_as_pesos(c)}?" for c in readings) if readings else ""


def _ilegible(texto: str, campo: str) -> LoyaltyError:
    """The error for a text that is not digits and separators with an accepted currency."""
    shown_as = shown(texto)
    resto = _SUFFIX.sub("", _PREFIX.sub("", texto))
    if resto.startswith("-") and _LOOKS_NUMERIC.fullmatch(resto[1:].strip()):
        return _error(campo, f"{shown_as} es negativo")
    readings = _readings_text(resto)
    if readings:
        dentro = re.search(r"[0-9.,][\s']+[0-9.,]", resto)
        motivo = (
            "lleva espacios o apóstrofos dentro del número"
            if dentro
            else "no tiene la forma de un importe"
        )
        return _error(campo, f"{shown_as} no es un importe: {motivo}{readings}")
    if _OTHER_CURRENCY.fullmatch(resto):
        return _error(
            campo,
            f"{shown_as} no es un importe: la única moneda admitida es el peso "
            f"({_uno_de(DELANTE)} delante, o {_uno_de(DETRAS)} detrás)",
        )
    return _error(campo, f"{shown_as} no es un importe; ejemplos: {_EXAMPLES}")


def _uno_de(textos: tuple[str, ...]) -> str:
    """`"a", "b" o "c"`: the texts quoted, the last after `o`."""
    quoted = [f'"{texto}"' for texto in textos]
    return " o ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)


# ---------------------------------------------------------------- importe_centavos


def parse_centavos(value: JsonValue, campo: str = "importe_centavos") -> int:
    """Integer cents: a JSON number with an integral value, in [0, MAX_CENTAVOS]. Anything
    else (text included) raises `LoyaltyError(IMPORTE_INVALIDO)`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _wrong_type(campo, value, "un número entero de centavos")
    shown_as = shown_number(value)
    centavos = integral(value)
    if centavos is None:
        if not math.isfinite(value):
            raise _error(campo, f"{shown_as} no es un número finito")
        raise _error(
            campo,
            f"{shown_as} no es un número entero de centavos (para pesos con decimales use importe)",
        )
    if centavos < 0:
        raise _error(campo, f"{shown_as} es negativo")
    if centavos > MAX_CENTAVOS:
        raise _error(campo, f"{shown_as} excede el máximo de {MAX_CENTAVOS} centavos")
    return centavos


# ---------------------------------------------------------------- points


def points_for(centavos: int, tasa: Decimal) -> int:
    """floor(centavos × tasa / 100): the points a sale earns at the program's rate (points
    per peso), in exact integer arithmetic. Negative cents or a negative, NaN or infinite
    rate are programming errors (ValueError)."""
    if centavos < 0:
        raise ValueError(f"centavos negativos: {centavos}")
    if not tasa.is_finite() or tasa < 0:
        raise ValueError(f"tasa inválida: {tasa}")
    numerador, denominador = tasa.as_integer_ratio()
    return (centavos * numerador) // (denominador * 100)
