"""Timestamps (DESIGN.md §2 "Timestamps"): every accepted form of `ts`, every rejection
with its `detalle`, and properties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.json_value import JsonValue
from loyalty_grpc.domain.timestamps import (
    EPOCH_MS_DESDE,
    MAX_TEXTO,
    MIN_TS,
    format_iso_utc,
    parse_ts,
)

NOW = datetime(2026, 11, 21, 21, 16, 52, tzinfo=UTC)
SALE = datetime(2026, 11, 21, 21, 16, 52, tzinfo=UTC)  # epoch 1795295812
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _detalle(value, now: datetime = NOW, *campo: str) -> str:
    with pytest.raises(LoyaltyError) as err:
        parse_ts(value, now, *campo)
    assert err.value.codigo is CodigoError.TS_INVALIDO
    return err.value.detalle


def test_format_iso_utc_unchanged():
    assert format_iso_utc(SALE) == "2026-11-21T21:16:52.000Z"
    assert format_iso_utc(SALE.replace(tzinfo=None)) == "2026-11-21T21:16:52.000Z"
    cdmx = SALE.astimezone(timezone(timedelta(hours=-6)))
    assert format_iso_utc(cdmx + timedelta(microseconds=123_456)) == "2026-11-21T21:16:52.123Z"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # ISO 8601 with a zone
        ("2026-11-21T21:16:52Z", SALE),
        ("2026-11-21T21:16:52z", SALE),
        ("2026-11-21t21:16:52Z", SALE),
        ("2026-11-21T15:16:52-06:00", SALE),
        ("2026-11-21T15:16:52-0600", SALE),
        ("2026-11-21T15:16:52-06", SALE),
        ("2026-11-22T02:46:52+05:30", SALE),
        ("2026-11-21T21:16:52+00:00", SALE),
        ("2026-11-21T21:16:52-00:00", SALE),
        ("2026-11-21 15:16:52-06:00", SALE),
        ("2026-11-21T21:16Z", SALE.replace(second=0)),
        # fractional seconds (`.` or `,`, up to 9 digits, truncated to the microsecond)
        ("2026-11-21T21:16:52.5Z", SALE + timedelta(milliseconds=500)),
        ("2026-11-21T21:16:52,5Z", SALE + timedelta(milliseconds=500)),
        ("2026-11-21T21:16:52.123Z", SALE + timedelta(milliseconds=123)),
        ("2026-11-21T21:16:52.123456Z", SALE + timedelta(microseconds=123_456)),
        ("2026-11-21T21:16:52.123456789Z", SALE + timedelta(microseconds=123_456)),
        # no zone → UTC; `YYYY-MM-DD hh:mm:ss`
        ("2026-11-21T21:16:52", SALE),
        ("2026-11-21 21:16:52", SALE),
        ("2026-11-21 21:16:52.250", SALE + timedelta(milliseconds=250)),
        ("  2026-11-21 21:16:52\n", SALE),
        # epoch seconds: JSON number (a float), int, digit string, with a fraction
        (1795295812.0, SALE),
        (1795295812, SALE),
        ("1795295812", SALE),
        (1795295812.5, SALE + timedelta(milliseconds=500)),
        ("1795295812.123456", SALE + timedelta(microseconds=123_456)),
        # epoch milliseconds (≥ 10^11)
        (1795295812000.0, SALE),
        (1795295812123.0, SALE + timedelta(milliseconds=123)),
        (1795295812123, SALE + timedelta(milliseconds=123)),
        ("1795295812123", SALE + timedelta(milliseconds=123)),
        ("1795295812123.5", SALE + timedelta(microseconds=123_500)),
        # bounds are inclusive
        ("2000-01-01T00:00:00Z", MIN_TS),
        (946684800.0, MIN_TS),
        (946684800000.0, MIN_TS),
        ("2026-11-22T21:16:52Z", NOW + timedelta(hours=24)),
    ],
)
def test_ts_accepted(value, expected):
    parsed = parse_ts(value, NOW)
    assert parsed == expected
    assert parsed.tzinfo is UTC


def test_naive_now_is_utc():
    assert parse_ts("2026-11-22T21:16:52Z", NOW.replace(tzinfo=None)) == NOW + timedelta(1)


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        (True, ["debe ser un texto ISO 8601 o un número epoch", "llegó un booleano"]),
        (None, ["llegó null"]),
        ([1795295812], ["llegó una lista"]),
        ({"ts": 1}, ["llegó un objeto"]),
        (float("nan"), ["nan no es un número finito"]),
        (float("inf"), ["no es un número finito"]),
        ("", ["ts: está vacío"]),
        (" ", ["está vacío"]),
        ("1" * (MAX_TEXTO + 1), ["texto demasiado largo"]),
        ("ayer", ['"ayer" no es una fecha y hora; formatos: ISO 8601']),
        ("21/11/2026 15:16", ["no es una fecha y hora; formatos"]),
        ("20261121T211652Z", ["no es una fecha y hora"]),  # basic format
        ("2026-11-21T21:16:52 Z", ["no es una fecha y hora"]),
        ("2026-11-21_21:16:52", ["no es una fecha y hora"]),
        ("2026-11-21T21:16:52.1234567890Z", ["no es una fecha y hora"]),
        ("２０２６-11-21T21:16:52Z", ["no es una fecha y hora"]),  # only ASCII digits
        ("1e9", ["no es una fecha y hora"]),
        ("2026-11-21", ["tiene fecha pero no hora"]),
        ("2026-11-21Z", ["tiene fecha pero no hora"]),
        ("2026-02-30T00:00:00Z", ["no es una fecha y hora válida"]),
        ("2026-11-21T24:00:00Z", ["no es una fecha y hora válida"]),
        ("2026-11-21T23:59:60Z", ["no es una fecha y hora válida"]),
        ("2026-11-21T21:16:52+24:00", ["no es una fecha y hora válida"]),
        ("2026-11-21T21:16:52+05:60", ["no es una fecha y hora válida"]),
        ("9999-12-31T23:59:59-05:00", ["no es una fecha y hora válida"]),
        ("0001-01-01T00:00:00+05:00", ["no es una fecha y hora válida"]),
        (-1.0, ["-1.0 es negativo"]),
        (-1, ["-1 es negativo"]),
        ("-1795295812", ["es negativo"]),
        (0.0, ["0.0 (epoch en segundos) es 1970-01-01T00:00:00.000Z, anterior a 2000-01-01"]),
        (946684799.999, ["anterior a 2000-01-01"]),
        (99_999_999_999.0, ["(epoch en segundos)", "más de 24 h en el futuro"]),
        (float(EPOCH_MS_DESDE), ["(epoch en milisegundos)", "anterior a 2000-01-01"]),
        (1.795295812e15, ["más de 24 h en el futuro", "¿microsegundos o nanosegundos?"]),
        ("1795295812000000000", ["¿microsegundos o nanosegundos?"]),
        (1e300, ["más de 24 h en el futuro"]),
        ("1999-12-31T23:59:59Z", ["es 1999-12-31T23:59:59.000Z, anterior a 2000-01-01"]),
        ("2000-01-01T00:00:00+00:01", ["anterior a 2000-01-01"]),
        (
            "2026-11-22T21:16:52.001Z",
            ["más de 24 h en el futuro", "hora del servicio 2026-11-21T21:16:52.000Z"],
        ),
        ("2030-01-01 00:00:00", ["más de 24 h en el futuro"]),
    ],
)
def test_ts_rejected(value, fragments):
    detalle = _detalle(value)
    assert detalle.startswith("ts: ")
    for fragment in fragments:
        assert fragment in detalle


def test_detalle_names_the_field():
    assert _detalle("x", NOW, "hora").startswith('hora: "x"')


# ---------------------------------------------------------------- properties

_OFFSETS = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
_IN_RANGE = st.datetimes(
    min_value=datetime(2000, 1, 2), max_value=datetime(2026, 11, 20), timezones=_OFFSETS
)


@settings(max_examples=300, deadline=None)
@given(
    _IN_RANGE,
    st.sampled_from(["T", " "]),
    st.sampled_from(["auto", "seconds", "milliseconds", "microseconds"]),
)
def test_iso_strings_round_trip(moment, sep, timespec):
    text = moment.isoformat(sep=sep, timespec=timespec)
    truncated = {
        "seconds": moment.replace(microsecond=0),
        "milliseconds": moment.replace(microsecond=moment.microsecond // 1000 * 1000),
    }.get(timespec, moment)
    parsed = parse_ts(text, NOW)
    assert parsed == truncated
    assert parsed.tzinfo is UTC
    # its UTC rendering with `Z`, and without a zone at all, is the same instant
    utc = truncated.astimezone(UTC)
    assert parse_ts(utc.isoformat().replace("+00:00", "Z"), NOW) == truncated
    assert parse_ts(utc.replace(tzinfo=None).isoformat(sep=" "), NOW) == truncated
    assert parse_ts(format_iso_utc(utc), NOW) == utc.replace(
        microsecond=utc.microsecond // 1000 * 1000
    )


_MIN_MS = int(MIN_TS.timestamp() * 1000)
_MAX_MS = int((NOW + timedelta(hours=24)).timestamp() * 1000)


@settings(max_examples=300, deadline=None)
@given(st.integers(_MIN_MS, _MAX_MS))
def test_epoch_seconds_and_milliseconds_are_the_same_instant(ms):
    instant = EPOCH + timedelta(milliseconds=ms)
    assert parse_ts(float(ms), NOW) == instant  # JSON number, ms
    assert parse_ts(ms, NOW) == instant
    assert parse_ts(str(ms), NOW) == instant
    assert parse_ts(ms / 1000, NOW) == instant  # JSON number, seconds
    assert parse_ts(f"{ms // 1000}.{ms % 1000:03d}", NOW) == instant
    whole = EPOCH + timedelta(seconds=ms // 1000)
    assert parse_ts(float(ms // 1000), NOW) == whole
    assert parse_ts(float(ms // 1000 * 1000), NOW) == whole


def _json() -> st.SearchStrategy[JsonValue]:
    leaves = (
        st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.floats(0, 2e12)
    )
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
        ),
        max_leaves=5,
    )


_ISOISH = st.text(alphabet="0123456789-:.,+TZtz ", max_size=32)
_ANY_DATETIME = st.builds(
    lambda moment, sep: moment.isoformat(sep=sep),
    st.datetimes(timezones=st.none() | _OFFSETS),
    st.sampled_from(["T", " "]),
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(_json(), st.text(), _ISOISH, _ANY_DATETIME, st.integers().map(str)))
def test_ts_never_raises_anything_else(value):
    try:
        parsed = parse_ts(value, NOW)
    except LoyaltyError as err:
        error = err
    else:
        assert parsed.tzinfo is UTC
        assert MIN_TS <= parsed <= NOW + timedelta(hours=24)
        return
    assert error.codigo is CodigoError.TS_INVALIDO
    assert error.detalle.startswith("ts: ")
