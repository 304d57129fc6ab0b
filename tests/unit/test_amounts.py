"""Amounts (DESIGN.md §2 "Amounts and points"): every accepted form of `importe` and
`importe_centavos`, every rejection with its `detalle`, points, and properties."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loyalty_grpc.domain.amounts import (
    MAX_CENTAVOS,
    MAX_TEXTO,
    parse_centavos,
    parse_importe,
    points_for,
)
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.json_value import JsonValue


def _detalle(fn, value, *campo: str) -> str:
    with pytest.raises(LoyaltyError) as err:
        fn(value, *campo)
    assert err.value.codigo is CodigoError.IMPORTE_INVALIDO
    return err.value.detalle


# ---------------------------------------------------------------- importe: accepted


@pytest.mark.parametrize(
    ("value", "centavos"),
    [
        # JSON numbers (they arrive as floats; ints are accepted too)
        (100.0, 10_000),
        (100, 10_000),
        (0, 0),
        (0.0, 0),
        (-0.0, 0),
        (12.5, 1_250),
        (99.9, 9_990),
        (1234.56, 123_456),
        (0.01, 1),
        (30.000000000000004, 3_000),  # float noise rounds to the cent
        (0.1 + 0.2, 30),  # 0.30000000000000004
        (1.1 * 3, 330),  # 3.3000000000000003
        (19.99 * 3, 5_997),  # 59.97 ± noise
        (12.3400009, 1_234),  # 0.0000009 pesos from a cent: noise
        (10_000_000.0, MAX_CENTAVOS),
        # strings: plain
        ("100", 10_000),
        ("0", 0),
        ("0.00", 0),
        ("007", 700),
        ("  42  ", 4_200),
        ("\u00a042\t", 4_200),
        ("1234", 123_400),
        ("12.5", 1_250),
        ("12,5", 1_250),
        ("12.50", 1_250),
        ("12,50", 1_250),
        ("0,05", 5),
        # both separators: the last one is the decimal separator
        ("1,234.56", 123_456),
        ("1.234,56", 123_456),
        ("1,234.5", 123_450),
        ("1.234,5", 123_450),
        ("1,234,567.89", 123_456_789),
        ("1.234.567,89", 123_456_789),
        ("10,000,000.00", MAX_CENTAVOS),
        # one kind: repeated or followed by exactly 3 digits → thousands
        ("1,234", 123_400),
        ("1.234", 123_400),
        ("12.345", 1_234_500),
        ("1,234,567", 123_456_700),
        ("1.234.567", 123_456_700),
        ("999", 99_900),
        # currency symbol or code, with or without a space, any case for the code
        ("$ 1,234.56", 123_456),
        ("$1234", 123_400),
        ("$1,234.56", 123_456),
        ("MX$ 99.90", 9_990),
        ("MX$99.90", 9_990),
        ("mx$ 99.90", 9_990),
        ("MXN 1.234,56", 123_456),
        ("MXN1234", 123_400),
        ("mxn 12,5", 1_250),
        ("1,234.56 MXN", 123_456),
        ("1234MXN", 123_400),
        ("$1,234.56 MXN", 123_456),
        ("$ 0", 0),
        # the no-break spaces locale formatters put between the currency and the number
        ("$\u00a0100", 10_000),
        ("MXN\u00a01.234,56", 123_456),
        ("1234,56\u00a0MXN", 123_456),  # Intl.NumberFormat("es-ES", MXN)
        ("MX$\u202f99.90", 9_990),
        ("$ \u00a0 5", 500),
        # zero with a minus sign is zero (docs/decisions.md)
        ("-0", 0),
        ("$-0.00", 0),
        ("MXN\u00a0-0", 0),
        ("-0.00", 0),
    ],
)
def test_importe_accepted(value, centavos):
    assert parse_importe(value) == centavos


# ---------------------------------------------------------------- importe: rejected


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        # wrong JSON types
        (True, ["debe ser un número o un texto", "llegó un booleano"]),
        (False, ["llegó un booleano"]),
        (None, ["llegó null"]),
        ([100], ["llegó una lista"]),
        ({"pesos": 100}, ["llegó un objeto"]),
        # numbers
        (float("nan"), ["nan no es un número finito"]),
        (float("inf"), ["inf no es un número finito"]),
        (float("-inf"), ["-inf no es un número finito"]),
        (-5.0, ["-5.0 es negativo"]),
        (-5, ["-5 es negativo"]),
        (-1e-9, ["es negativo"]),
        (12.345, ["12.345 tiene más de 2 decimales"]),
        (0.001, ["tiene más de 2 decimales"]),
        (12.340001, ["tiene más de 2 decimales"]),  # exactly 0.000001 pesos: not noise
        (10_000_000.01, ["excede el máximo de 10000000.00 pesos"]),
        (10_000_001, ["excede el máximo"]),
        (1e300, ["excede el máximo"]),
        # strings
        ("", ["importe: está vacío"]),
        ("   ", ["está vacío"]),
        ("1" * (MAX_TEXTO + 1), ["texto demasiado largo"]),
        ("-5", ['"-5" es negativo']),
        ("-$5", ["es negativo"]),
        ("$-5", ["es negativo"]),
        ("- 1 234", ["es negativo"]),
        ("-1.2345", ["es negativo"]),
        ("+5", ['no lleva signo "+"', "¿5?"]),
        ("+-5", ["lleva dos signos"]),
        ("1.2345", ['tras "." hay 4 dígitos', "¿1.23? ¿12345?"]),
        ("1,2345", ['tras "," hay 4 dígitos', "¿1.23? ¿12345?"]),
        ("1,234.567", ["máximo 2 decimales", "¿1234.57? ¿1234567?"]),
        ("1.234,567", ["máximo 2 decimales", "¿1234.57? ¿1234567?"]),
        (
            "1234.567",
            ["separa miles, pero los grupos de miles son de 3 dígitos", "¿1234.57? ¿1234567?"],
        ),
        ("0,123", ["sin cero inicial", "¿0.12? ¿123?"]),
        ("0.500", ["sin cero inicial"]),
        ("1.234.56", ['"." repetido separa miles', "¿1234.56? ¿123456?"]),
        ("1,23,456", ['"," repetido separa miles', "¿123.46? ¿123456?"]),
        ("1,234.567.89", ['el último (".") es el separador decimal', "¿1234567.89?"]),
        ("1234,567.89", ["grupos de miles", "¿1234567.89?"]),
        (".5", ["dígitos a ambos lados", "¿0.50? ¿5?"]),
        ("5.", ["dígitos a ambos lados", "¿5?"]),
        ("1..5", ["dígitos a ambos lados", "¿1.50? ¿15?"]),
        ("1 234,56", ["lleva espacios", "¿1234.56? ¿123456?"]),
        ("1'234.56", ["apóstrofos", "¿1234.56? ¿123456?"]),
        ("$ 1 234", ["lleva espacios", "¿1234?"]),
        ("1\u202f234,56\u00a0MXN", ["lleva espacios", "¿1234.56? ¿123456?"]),  # fr-FR
        # other whitespace between the currency and the number
        ("$\t100", ["no tiene la forma de un importe", "¿100?"]),
        ("$\n100", ["no tiene la forma de un importe", "¿100?"]),
        ("$\u2003100", ["no tiene la forma de un importe", "¿100?"]),
        ("USD 100", ["la única moneda admitida es el peso"]),
        ("US$100", ["la única moneda admitida es el peso"]),
        ("€5", ["la única moneda admitida es el peso"]),
        ("100 pesos", ["la única moneda admitida es el peso"]),
        ("100 $", ["la única moneda admitida es el peso"]),
        ("abc", ['"abc" no es un importe; ejemplos:']),
        ("1e3", ["no es un importe; ejemplos:"]),
        ("$", ["no es un importe"]),
        ("MXN", ["no es un importe"]),
        ("١٢٣", ["no es un importe"]),  # only ASCII digits
        ("10,000,000.01", ["excede el máximo"]),
        ("99999999999", ["excede el máximo"]),
    ],
)
def test_importe_rejected(value, fragments):
    detalle = _detalle(parse_importe, value)
    assert detalle.startswith("importe: ")
    for fragment in fragments:
        assert fragment in detalle


def test_importe_detalle_names_the_field_and_quotes_safely():
    assert _detalle(parse_importe, "x", "monto").startswith('monto: "x"')
    detalle = _detalle(parse_importe, "a\nb" + "z" * 50)  # shown escaped, cut at 32
    assert "\n" not in detalle
    assert '"a\\nb' + "z" * 28 + '"… no es un importe' in detalle
    assert "z" * 38 not in detalle


def test_readings_out_of_bounds_are_left_out():
    detalle = _detalle(parse_importe, "9.999.999.999,5")  # too large either way
    assert "¿" not in detalle


# ---------------------------------------------------------------- importe_centavos


@pytest.mark.parametrize(
    ("value", "centavos"),
    [
        (0.0, 0),
        (123456.0, 123_456),
        (123456, 123_456),
        (-0.0, 0),
        (-0, 0),
        (1e2, 100),
        (float(MAX_CENTAVOS), MAX_CENTAVOS),
    ],
)
def test_centavos_accepted(value, centavos):
    assert parse_centavos(value) == centavos


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (True, "llegó un booleano"),
        (None, "llegó null"),
        ([1], "llegó una lista"),
        ({}, "llegó un objeto"),
        (12.5, "12.5 no es un número entero de centavos"),
        (float("nan"), "no es un número finito"),
        (float("inf"), "no es un número finito"),
        (-1.0, "-1.0 es negativo"),
        (-1, "-1 es negativo"),
        (float(MAX_CENTAVOS + 1), "excede el máximo de 1000000000 centavos"),
        (MAX_CENTAVOS + 1, "excede el máximo"),
        (1e300, "excede el máximo"),
        # the contract's type is a number: text, even of digits, is refused
        *(
            (text, "debe ser un número entero de centavos; llegó un texto")
            for text in ("123456", " 42 ", "0", "-1", "", "12.50", "$100", "1" * (MAX_TEXTO + 1))
        ),
    ],
)
def test_centavos_rejected(value, fragment):
    detalle = _detalle(parse_centavos, value)
    assert detalle.startswith("importe_centavos: ")
    assert fragment in detalle
    assert _detalle(parse_centavos, value, "amount_cents").startswith("amount_cents: ")


# ---------------------------------------------------------------- points


@pytest.mark.parametrize(
    ("centavos", "tasa", "puntos"),
    [
        (123_456, Decimal("0.1"), 123),  # 1234.56 pesos × 0.1 = 123.456
        (100_000, Decimal("0.1"), 100),
        (99_999, Decimal(1), 999),  # 999.99 → 999
        (0, Decimal("0.1"), 0),
        (1_000, Decimal("0.3"), 3),  # 0.1 + 0.2 style: exact, not 2.9999
        (1_000, Decimal("0.07"), 0),  # 10 pesos × 0.07 = 0.7
        (10_000, Decimal("0.07"), 7),
        (MAX_CENTAVOS, Decimal(2), 20_000_000),
        (MAX_CENTAVOS, Decimal("0.333333333333333333333333333333333"), 3_333_333),
        (5_000, Decimal("1.5"), 75),
        (3, Decimal(100), 3),
    ],
)
def test_points_for(centavos, tasa, puntos):
    assert points_for(centavos, tasa) == puntos


@pytest.mark.parametrize(
    ("centavos", "tasa"),
    [
        (-1, Decimal(1)),
        (1, Decimal(-1)),
        (1, Decimal("NaN")),
        (1, Decimal("Infinity")),
    ],
)
def test_points_for_refuses_programming_errors(centavos, tasa):
    with pytest.raises(ValueError, match=r"inválida|negativos"):
        points_for(centavos, tasa)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, MAX_CENTAVOS), st.decimals(0, 1000, places=4))
def test_points_match_exact_fractions(centavos, tasa):
    exact = Decimal(centavos) * tasa / 100  # ≤ 18 significant digits: exact in prec 28
    assert points_for(centavos, tasa) == int(exact.to_integral_value(rounding="ROUND_FLOOR"))


# ---------------------------------------------------------------- properties

_CONVENTIONS = [(".", ","), (",", ".")]  # (decimal, thousands)
_PREFIXES = ["", " ", "$", "$ ", "MX$", "MX$ ", "mx$ ", "MXN", "MXN ", "mxn "]
_SUFFIXES = ["", " ", " MXN", "MXN", " mxn"]


def _format(
    centavos: int,
    convention: tuple[str, str],
    grouped: bool,
    decimals: str,
    prefix: str,
    suffix: str,
) -> str:
    dec, th = convention
    pesos, resto = divmod(centavos, 100)
    entero = f"{pesos:,}".replace(",", th) if grouped else str(pesos)
    if resto == 0 and decimals == "none":
        numero = entero
    elif resto % 10 == 0 and decimals == "short":
        numero = f"{entero}{dec}{resto // 10}"
    else:
        numero = f"{entero}{dec}{resto:02d}"
    return f"{prefix}{numero}{suffix}"


@settings(max_examples=300, deadline=None)
@given(
    centavos=st.one_of(
        st.integers(0, MAX_CENTAVOS),
        st.integers(0, 200_000),
        st.sampled_from([0, 1, 99, 100, 99_999, 100_000, MAX_CENTAVOS]),
    ),
    convention=st.sampled_from(_CONVENTIONS),
    grouped=st.booleans(),
    decimals=st.sampled_from(["none", "short", "full"]),
    prefix=st.sampled_from(_PREFIXES),
    suffix=st.sampled_from(_SUFFIXES),
)
def test_formatted_amounts_round_trip(centavos, convention, grouped, decimals, prefix, suffix):
    text = _format(centavos, convention, grouped, decimals, prefix, suffix)
    assert parse_importe(text) == centavos, text


@settings(max_examples=300, deadline=None)
@given(st.integers(0, MAX_CENTAVOS))
def test_json_numbers_round_trip(centavos):
    pesos, resto = divmod(centavos, 100)
    assert parse_importe(float(f"{pesos}.{resto:02d}")) == centavos  # the JSON text
    assert parse_importe(centavos / 100) == centavos  # computed: noise
    assert parse_importe(centavos * 0.01) == centavos
    assert parse_importe((centavos / 100 + 0.1) - 0.1) == centavos
    assert parse_importe(float(pesos)) == pesos * 100
    assert parse_centavos(float(centavos)) == centavos


@settings(max_examples=200, deadline=None)
@given(st.integers(0, MAX_CENTAVOS // 100 - 1), st.integers(0, 99), st.integers(1, 9))
def test_a_real_third_decimal_is_rejected(pesos, centimos, milesima):
    numero = float(f"{pesos}.{centimos:02d}{milesima}")
    assert "más de 2 decimales" in _detalle(parse_importe, numero)


def _json() -> st.SearchStrategy[JsonValue]:
    leaves = (
        st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.floats(-1e8, 1e8)
    )
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
        ),
        max_leaves=5,
    )


_NUMBERISH = st.text(alphabet="0123456789.,$MXNmxn +-'\u00a0", max_size=16)


def _only_own_error(fn, value) -> int | None:
    try:
        result = fn(value)
    except LoyaltyError as err:
        error = err
    else:
        assert type(result) is int
        assert 0 <= result <= MAX_CENTAVOS
        return result
    assert error.codigo is CodigoError.IMPORTE_INVALIDO
    assert error.detalle
    return None


@settings(max_examples=300, deadline=None)
@given(st.one_of(_json(), st.text(), _NUMBERISH))
def test_importe_never_raises_anything_else(value):
    _only_own_error(parse_importe, value)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_json(), st.text(), _NUMBERISH, st.integers().map(str)))
def test_centavos_never_raises_anything_else(value):
    _only_own_error(parse_centavos, value)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789.,", min_size=1, max_size=14))
def test_accepted_text_is_one_of_its_two_readings(text):
    """An accepted number text reads every separator as thousands, or the last one as
    the decimal point: never anything else."""
    result = _only_own_error(parse_importe, text)
    if result is None:
        return
    digits = re.sub(r"[.,]", "", text)
    readings = {int(digits) * 100}
    last = max(text.rfind("."), text.rfind(","))
    if last >= 0:
        before = re.sub(r"[.,]", "", text[:last])
        after = text[last + 1 :]
        if 1 <= len(after) <= 2 and before:
            readings.add(int(before) * 100 + int(after.ljust(2, "0")))
    assert result in readings


# ---------------------------------------------------------------- docs/sales.md's table


def _doc_amount_rows() -> list[tuple[str, str]]:
    """(Sent, Cents) of each row of the `importe` table of docs/sales.md."""
    page = Path(__file__).resolve().parents[2] / "docs" / "sales.md"
    table = page.read_text(encoding="utf-8").split("| Sent | Cents | Rule |", 1)[1]
    table = table.split("\n\n", 1)[0]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| `")]
    return [(row[0].removeprefix("| "), row[1]) for row in rows]


def test_every_input_of_the_documented_amount_table_is_json_and_reads_as_it_says():
    rows = _doc_amount_rows()
    assert len(rows) >= 8
    for sent, cents in rows:
        # Asides in parentheses (`0.1 + 0.2` explains an input) are not inputs.
        inputs = re.findall(r"`([^`]+)`", re.sub(r" \([^)]*\)", "", sent))
        expected = [int(c) for c in cents.split(", ")]
        if len(expected) == 1:
            expected *= len(inputs)
        assert len(inputs) == len(expected), sent
        for raw, centavos in zip(inputs, expected, strict=True):
            value = json.loads(raw)  # every input as a client would send it: JSON
            assert parse_importe(value) == centavos, raw
