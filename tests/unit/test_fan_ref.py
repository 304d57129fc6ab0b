"""The `fan` value's readings (DESIGN.md §2) and the one-of-aliases rule."""

from __future__ import annotations

import pytest

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.fan_ref import (
    FAN_FIELDS,
    MAX_FAN_TEXT,
    FanRef,
    Forma,
    one_of,
    parse_fan_ref,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("HAL0001", FanRef(Forma.TEXTO, "HAL0001", "HAL0001")),
        ("  hal 00 01\t", FanRef(Forma.TEXTO, "HAL0001", "hal 00 01")),
        ("hd-0001", FanRef(Forma.TEXTO, "HD-0001", "hd-0001")),
        ("q7Hk2Pz", FanRef(Forma.TEXTO, "Q7HK2PZ", "q7Hk2Pz")),
        ("https://halcones.example/fan/v/q7Hk2Pz", FanRef(Forma.QR_URL, "q7Hk2Pz")),
        ("http://x.example/v/q7Hk2Pz/", FanRef(Forma.QR_URL, "q7Hk2Pz")),
        ("HTTPS://x.example/v/q7Hk2Pz?utm=1#frag", FanRef(Forma.QR_URL, "q7Hk2Pz")),
        (" Ana@Example.COM ", FanRef(Forma.CORREO, "ana@example.com")),
    ],
)
def test_readings(text, expected):
    assert parse_fan_ref(text) == expected


def test_url_without_token_is_not_found():
    with pytest.raises(LoyaltyError) as caught:
        parse_fan_ref("https://x.example/")
    assert caught.value.codigo is CodigoError.FAN_NO_ENCONTRADO


def test_one_of():
    assert one_of({"fan": None, "qr": "x"}) == ("qr", "x")
    assert one_of({"a": None}, required=False) is None
    with pytest.raises(LoyaltyError) as caught:
        one_of({"fan": None, "fan_id": None})
    assert caught.value.codigo is CodigoError.CAMPO_REQUERIDO
    assert "fan / fan_id" in caught.value.detalle
    with pytest.raises(LoyaltyError) as caught:
        one_of({"fan": "a", "fan_id": "b"})
    assert caught.value.codigo is CodigoError.SOLICITUD_INVALIDA


# ---------------------------------------------------------------- the largest value


@pytest.mark.parametrize("campo", FAN_FIELDS)
def test_the_largest_value_is_read_and_one_more_character_is_refused(campo):
    largest = "x" * (MAX_FAN_TEXT - len("@example.com")) + "@example.com"
    assert parse_fan_ref(largest, campo).forma is Forma.CORREO
    assert parse_fan_ref(" " * 6 + "H" * (MAX_FAN_TEXT - 6), campo).valor == "H" * 506
    for too_long in ("x" * MAX_FAN_TEXT + "@example.com", "H" * (MAX_FAN_TEXT + 1), "H" * 60_000):
        with pytest.raises(LoyaltyError) as caught:
            parse_fan_ref(too_long, campo)
        error = caught.value
        assert error.codigo is CodigoError.SOLICITUD_INVALIDA
        assert error.detalle.startswith(f"{campo}: más de {MAX_FAN_TEXT} caracteres ")
        assert f"({len(too_long)})" in error.detalle
        assert "xxxx" not in error.detalle  # never the value
        assert "HHHH" not in error.detalle


# ---------------------------------------------------------------- look-alike letters

# Each would reach an ASCII Fan ID, code or e-mail if Python's upper()/lower() were used.
NOT_ASCII_TEXT = [
    "otro\u017fi01",  # ſ → S: resolved Fan ID OTROSI01 (issue 22 §5)
    "hd-d\u0131sp-0001",  # ı → I
    "\u212aIKI01",  # Kelvin sign
    "\uff24EMO0001",  # fullwidth Ｄ
    "DEMO\uff10001",  # fullwidth ０
    "\u0415\u0421-0001",  # Cyrillic Е С
    "DEMO\u200b0001",
    "DEMO0001\u200d",
    "\ufeffDEMO0001",
]


@pytest.mark.parametrize("text", NOT_ASCII_TEXT)
def test_a_text_value_that_is_not_ascii_matches_no_fan(text):
    ref = parse_fan_ref(text)
    assert ref.forma is Forma.TEXTO
    assert not ref.matchable
    assert not ref.valor.isascii()  # nothing folded into ASCII


@pytest.mark.parametrize("token", ["q7Hk2P\u017f", "\uff51\uff17", "q7\u200bHk"])
def test_a_qr_url_with_a_token_that_is_not_ascii_matches_no_fan(token):
    ref = parse_fan_ref(f"https://x.example/fan/v/{token}")
    assert ref.forma is Forma.QR_URL
    assert not ref.matchable


@pytest.mark.parametrize(
    ("text", "valor"),
    [
        ("\u212aiki@Example.com", "\u212aiki@example.com"),  # Kelvin sign kept: not kiki@
        ("K\u0131K\u0131@example.com", "k\u0131k\u0131@example.com"),
        ("JOS\u00c9@example.com", "jos\u00c9@example.com"),
    ],
)
def test_an_email_folds_only_ascii_letters(text, valor):
    ref = parse_fan_ref(text)
    assert ref == FanRef(Forma.CORREO, valor)
    assert ref.matchable


def test_ascii_values_are_matchable():
    assert all(parse_fan_ref(t).matchable for t in ("HAL0001", "https://x/v/q7", "a@b.c"))
