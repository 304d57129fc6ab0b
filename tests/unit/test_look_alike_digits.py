"""Digits that are not ASCII (issue 22 §5). Python's `int("１２")`, `Decimal("١٢")` and a
regex `\\d` read fullwidth, Arabic-Indic and other decimal digits as numbers; the contract's
numbers are ASCII, and the parsers match `[0-9]`, so such a text is refused with the
field's own codigo and shown escaped in `detalle` (a person sees what arrived) — never
read as another amount, moment or page size."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from loyalty_grpc.domain.amounts import parse_importe
from loyalty_grpc.domain.codes import parse_promo_ref
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.roster import parse_limite
from loyalty_grpc.domain.timestamps import parse_ts

NOW = datetime(2026, 11, 21, 21, 16, 52, tzinfo=UTC)


def refused(fn, *args) -> LoyaltyError:
    with pytest.raises(LoyaltyError) as caught:
        fn(*args)
    return caught.value


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("\uff11\uff12", "\\uff11\\uff12"),  # １２ fullwidth
        ("1\uff12", "1\\uff12"),
        ("\u0661\u0662", "\\u0661\\u0662"),  # ١٢ Arabic-Indic
        ("\u0967\u0968", "\\u0967\\u0968"),  # १२ Devanagari
        ("$\uff11\uff12", "$\\uff11\\uff12"),
        ("12\uff0e50", "12\\uff0e50"),  # ． fullwidth full stop
        ("12\u200b", "12\\u200b"),  # zero-width space after the number
    ],
)
def test_an_importe_in_other_digits_is_not_read(text, escaped):
    error = refused(parse_importe, text)
    assert error.codigo is CodigoError.IMPORTE_INVALIDO
    assert f'"{escaped}"' in error.detalle


@pytest.mark.parametrize(
    "text",
    [
        "\uff11\uff17\uff19\uff15\uff12\uff19\uff15\uff18\uff11\uff12",  # fullwidth epoch
        "\u0661\u0667\u0669\u0665\u0662\u0669\u0665\u0668\u0661\u0662",
        "2026-11-21T21:16:52.\uff11\uff12\uff13Z",
        "2026-11-21T21:16:\uff15\uff12Z",
    ],
)
def test_a_ts_in_other_digits_is_not_read(text):
    error = refused(parse_ts, text, NOW)
    assert error.codigo is CodigoError.TS_INVALIDO
    assert "\\uff1" in error.detalle or "\\u066" in error.detalle


@pytest.mark.parametrize("text", ["\uff11\uff10", "\u0661\u0660", "1\uff10"])
def test_a_limite_in_other_digits_is_not_read(text):
    error = refused(parse_limite, text)
    assert error.codigo is CodigoError.SOLICITUD_INVALIDA
    assert "no es un número entero" in error.detalle


def test_a_promo_in_other_digits_is_a_name_not_an_id():
    ref = parse_promo_ref("\uff11\uff12")
    assert ref.id is None
    assert ref.nombre == "\uff11\uff12"
