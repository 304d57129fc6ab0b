"""Timestamps as the contract writes and reads them (DESIGN.md §2 "Timestamps").

Output: ISO 8601 UTC with `Z` (`format_iso_utc`).

Input (`parse_ts`), always returned as an aware UTC datetime:
- ISO 8601 text, extended format: `YYYY-MM-DD` then `T`, `t` or one space, then `hh:mm`
  with optional `:ss` and optional fraction (`.` or `,`, 1–9 digits, truncated to the
  microsecond), then an optional zone: `Z`/`z`, `±hh:mm`, `±hhmm` or `±hh`. No zone → UTC
  (so `YYYY-MM-DD hh:mm:ss` is UTC). A date without a time is rejected: read as midnight
  UTC it would fall on the previous evening in Mexico.
- A number or a text of digits (optionally with a `.` fraction): epoch seconds, or epoch
  milliseconds when the value is ≥ EPOCH_MS_DESDE (10^11 s would be the year 5138).
- Rejected (`ts_invalido`, `detalle` names the field and the reason): anything else,
  booleans, null, lists, objects, NaN/∞, negative epochs, impossible dates or zones,
  moments before MIN_TS (2000-01-01T00:00:00Z: a POS clock reset to 1970, or seconds
  mistaken for something else, never a real sale) and moments more than MAX_ADELANTO
  (24 h) after the server's `now` (exactly `now + 24 h` is accepted).

A google.protobuf.Timestamp of a native gRPC caller (`from_timestamp`): the same range.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone
from decimal import ROUND_FLOOR, ROUND_HALF_EVEN, Context, Decimal, InvalidOperation, Overflow

from loyalty_grpc.domain.detalle import shown, shown_number, too_long
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.json_value import JsonValue, json_type_name

MIN_TS = datetime(2000, 1, 1, tzinfo=UTC)
MAX_ADELANTO = timedelta(hours=24)
EPOCH_MS_DESDE = 10**11
MAX_TEXTO = 64

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_MICROS = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
_CTX = Context(prec=100, rounding=ROUND_HALF_EVEN, traps=[InvalidOperation, Overflow])
_ISO = re.compile(
    r"(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})"
    r"(?:[Tt ](?P<h>[0-9]{2}):(?P<mi>[0-9]{2})"
    r"(?::(?P<s>[0-9]{2})(?:[.,](?P<f>[0-9]{1,9}))?)?)?"
    r"(?P<zona>[Zz]|(?P<zs>[+-])(?P<zh>[0-9]{2})(?::?(?P<zm>[0-9]{2}))?)?"
)
_EPOCH_TEXT = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_FORMATS = (
    'ISO 8601 ("2026-11-21T15:16:52-06:00", "2026-11-21T21:16:52Z"), '
    '"2026-11-21 21:16:52" (UTC), epoch en segundos (1795295812) o en '
    "milisegundos (1795295812000)"
)


def format_iso_utc(moment: datetime) -> str:
    """`2026-11-21T21:16:52.123Z`: UTC, millisecond precision. Naive values are UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _error(campo: str, problema: str) -> LoyaltyError:
    return LoyaltyError(CodigoError.TS_INVALIDO, f"{campo}: {problema}")


def parse_ts(value: JsonValue, now: datetime, campo: str = "ts") -> datetime:
    """The time of a sale or redemption as the client sent it → an aware UTC datetime, within
    [MIN_TS, now + MAX_ADELANTO]. Anything else raises `LoyaltyError(TS_INVALIDO)`.
    A naive `now` is UTC."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _error(
            campo, f"debe ser un texto ISO 8601 o un número epoch; llegó {json_type_name(value)}"
        )
    if isinstance(value, int):
        return _from_epoch(Decimal(value), str(value), now, campo)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _error(campo, f"{shown_number(value)} no es un número finito")
        return _from_epoch(Decimal(repr(value)), shown_number(value), now, campo)
    texto = value.strip()
    shown_as = shown(texto)
    if not texto:
        raise _error(campo, "está vacío")
    if len(texto) > MAX_TEXTO:
        raise _error(campo, too_long(len(texto), MAX_TEXTO))
    if _EPOCH_TEXT.fullmatch(texto):
        return _from_epoch(Decimal(texto), shown_as, now, campo)
    return _in_range(_from_iso(texto, shown_as, campo), shown_as, now, campo)


def from_timestamp(seconds: int, nanos: int, now: datetime, campo: str) -> datetime:
    """A google.protobuf.Timestamp (seconds and nanos since the epoch, as a native gRPC
    caller sends `ts_utc`) -> an aware UTC datetime, within the range `parse_ts` accepts
    (the same check). Nanoseconds are truncated to the microsecond."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    if not 0 <= nanos < 1_000_000_000:
        raise _error(campo, f"nanos {nanos} fuera de rango (de 0 a 999999999)")
    micros = seconds * 1_000_000 + nanos // 1000
    shown_as = f"Timestamp de {seconds} s"
    if micros > _MAX_MICROS:
        raise _error(campo, f"{shown_as} está más de 24 h en el futuro")
    if micros < 0:
        raise _error(campo, f"{shown_as} es anterior a {format_iso_utc(MIN_TS)}")
    return _in_range(_EPOCH + timedelta(microseconds=micros), shown_as, now, campo)


def _from_epoch(valor: Decimal, shown_as: str, now: datetime, campo: str) -> datetime:
    if valor < 0:
        raise _error(campo, f"{shown_as} es negativo")
    en_ms = valor >= EPOCH_MS_DESDE
    unidad = "milisegundos" if en_ms else "segundos"
    por_unidad = Decimal(1000 if en_ms else 1_000_000)
    micros = int(
        _CTX.multiply(valor, por_unidad).to_integral_value(rounding=ROUND_FLOOR, context=_CTX)
    )
    leido = f"{shown_as} (epoch en {unidad})"
    if micros > _MAX_MICROS:
        pista = (
            "; ¿microsegundos o nanosegundos? envíe segundos o milisegundos"
            if valor >= 10**14
            else ""
        )
        raise _error(campo, f"{leido} está más de 24 h en el futuro{pista}")
    momento = _EPOCH + timedelta(microseconds=micros)
    return _in_range(momento, leido, now, campo)


def _from_iso(texto: str, shown_as: str, campo: str) -> datetime:
    iso = _ISO.fullmatch(texto)
    if iso is None:
        raise _error(campo, f"{shown_as} no es una fecha y hora; formatos: {_FORMATS}")
    if iso["h"] is None:
        raise _error(
            campo,
            f"{shown_as} tiene fecha pero no hora; envíe fecha, hora y "
            'zona, p. ej. "2026-11-21T15:16:52-06:00"',
        )
    fraccion = (iso["f"] or "").ljust(6, "0")[:6]
    try:
        zona = UTC
        if iso["zs"]:
            horas, minutos = int(iso["zh"]), int(iso["zm"] or 0)
            if horas > 23 or minutos > 59:
                raise ValueError("zona fuera de rango")
            desfase = timedelta(hours=horas, minutes=minutos)
            zona = timezone(-desfase if iso["zs"] == "-" else desfase)
        local = datetime(
            int(iso["y"]),
            int(iso["mo"]),
            int(iso["d"]),
            int(iso["h"]),
            int(iso["mi"]),
            int(iso["s"] or 0),
            int(fraccion),
            tzinfo=zona,
        )
        return local.astimezone(UTC)
    except (ValueError, OverflowError):
        raise _error(
            campo, f"{shown_as} no es una fecha y hora válida (día, hora o zona fuera de rango)"
        ) from None


def _in_range(momento: datetime, shown_as: str, now: datetime, campo: str) -> datetime:
    if momento < MIN_TS:
        raise _error(
            campo, f"{shown_as} es {format_iso_utc(momento)}, anterior a {format_iso_utc(MIN_TS)}"
        )
    if momento > now + MAX_ADELANTO:
        raise _error(
            campo,
            f"{shown_as} es {format_iso_utc(momento)}, más de 24 h en el "
            f"futuro (hora del servicio {format_iso_utc(now)})",
        )
    return momento
