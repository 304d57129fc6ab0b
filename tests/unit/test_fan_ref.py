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
