"""Roster cursors (domain/roster_cursor.py): opaque, URL-safe, bound to the program;
anything else is cursor_invalido. Also the edge's `limite` and `desde` rules
(api/roster.py), which need no I/O."""

from __future__ import annotations

import base64
import hashlib
import re
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loyalty_grpc.api.roster import _desde
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.roster import LIMITE_DEFAULT, LIMITE_MAX, parse_limite
from loyalty_grpc.domain.roster_cursor import (
    CURSOR_LENGTH,
    MAX_POSITION,
    Fase,
    Posicion,
    decode_cursor,
    encode_cursor,
)

positions = st.builds(
    Posicion, st.sampled_from(Fase), st.integers(0, MAX_POSITION), st.integers(0, MAX_POSITION)
)
programs = st.text(min_size=1, max_size=40)


def invalid(programa: str, text: str) -> LoyaltyError:
    with pytest.raises(LoyaltyError) as caught:
        decode_cursor(programa, text)
    assert caught.value.codigo is CodigoError.CURSOR_INVALIDO
    return caught.value


@given(programs, positions)
def test_round_trip_url_safe_fixed_length(programa, posicion):
    text = encode_cursor(programa, posicion)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", text)
    assert len(text) == CURSOR_LENGTH
    assert decode_cursor(programa, text) == posicion


@given(programs, programs, positions)
def test_another_programs_cursor_is_refused(a, b, posicion):
    if a == b:
        return
    error = invalid(b, encode_cursor(a, posicion))
    assert "desde" in error.detalle


def test_program_binding_is_exact():
    cursor = encode_cursor("halcones", Posicion(Fase.CAMBIOS, 1000, 5))
    for other in ("Halcones", "halcones ", "halcone", "halcones2", ""):
        invalid(other, cursor)


@given(positions, st.integers(0, CURSOR_LENGTH - 1), st.sampled_from("A_-z09"))
def test_any_changed_character_is_refused(posicion, where, char):
    text = encode_cursor("p", posicion)
    altered = text[:where] + char + text[where + 1 :]
    if altered == text:
        return
    invalid("p", altered)


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "x",
        "abc",
        "0",
        "12345",
        "null",
        "siguiente",
        "A" * CURSOR_LENGTH,
        "A" * (CURSOR_LENGTH + 1),
        "ñ" * CURSOR_LENGTH,
        " " * CURSOR_LENGTH,
        "+" * CURSOR_LENGTH,
        "/" * CURSOR_LENGTH,
        "=" * CURSOR_LENGTH,
    ],
)
def test_garbage_is_refused(garbage):
    invalid("p", garbage)


def test_truncated_padded_or_extended_is_refused():
    text = encode_cursor("p", Posicion(Fase.FOTO, 7, 9))
    invalid("p", text[:-1])
    invalid("p", text + "=")
    invalid("p", text + "A")
    invalid("p", " " + text[1:])


def test_standard_base64_alphabet_is_refused():
    # Find a cursor whose text has '-' or '_' and spell it with '+' / '/'.
    for pk in range(1000):
        text = encode_cursor("p", Posicion(Fase.CAMBIOS, 2**40 + pk, pk))
        if "-" in text or "_" in text:
            invalid("p", text.replace("-", "+").replace("_", "/"))
            return
    pytest.fail("no cursor with - or _ found")


def test_non_canonical_last_character_is_refused():
    """base64 ignores the unused low bits of the last character; a cursor has exactly one
    spelling."""
    text = encode_cursor("p", Posicion(Fase.CAMBIOS, 3, 4))
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(text[-1])
    sibling = text[:-1] + alphabet[last ^ 1]
    invalid("p", sibling)


def _forge(programa: str, version: int, fase: int, xid: int, pk: int) -> str:
    """A cursor with a correct tag but a body the service never writes."""
    body = struct.pack(">BBQQ", version, fase, xid, pk)
    tag = hashlib.sha256(
        b"loyalty roster cursor\x00" + programa.encode() + b"\x00" + body
    ).digest()[:8]
    return base64.urlsafe_b64encode(body + tag).rstrip(b"=").decode()


def test_forge_helper_matches_the_format():
    assert _forge("p", 1, 2, 10, 20) == encode_cursor("p", Posicion(Fase.CAMBIOS, 10, 20))


@pytest.mark.parametrize(
    ("version", "fase", "xid", "pk"),
    [
        (2, 2, 10, 20),
        (0, 2, 10, 20),
        (1, 0, 10, 20),
        (1, 3, 10, 20),
        (1, 2, 2**63, 20),
        (1, 1, 10, 2**64 - 1),
    ],
)
def test_unknown_version_phase_or_out_of_range_is_refused(version, fase, xid, pk):
    invalid("p", _forge("p", version, fase, xid, pk))


def test_position_range_is_checked_on_encode():
    with pytest.raises(ValueError, match="out of range"):
        Posicion(Fase.CAMBIOS, -1, 0)
    with pytest.raises(ValueError, match="out of range"):
        Posicion(Fase.FOTO, 0, 2**63)


# ---------------------------------------------------------------- limite and desde (edge)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, LIMITE_DEFAULT),
        (1, 1),
        (1.0, 1),
        (500, 500),
        (2000, 2000),
        (2001, LIMITE_MAX),
        (10**30, LIMITE_MAX),
        (1e300, LIMITE_MAX),
        ("7", 7),
        (" 7 ", 7),
        ("+7", 7),
        ("7.0", 7),
        ("2001", LIMITE_MAX),
        ("99999999999999999999999", LIMITE_MAX),
    ],
)
def test_limite_accepted(value, expected):
    assert parse_limite(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        0,
        -1,
        0.0,
        1.5,
        "0",
        "-3",
        "abc",
        "",
        "1e3",
        "7.5",
        "0x10",
        True,
        False,
        [],
        {},
    ],
)
def test_limite_refused(value):
    with pytest.raises(LoyaltyError) as caught:
        parse_limite(value)
    assert caught.value.codigo is CodigoError.SOLICITUD_INVALIDA
    assert caught.value.detalle.startswith("limite")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("  ", None),
        (" abc ", "abc"),
        (12345, "12345"),
        (12345.0, "12345"),
        (1.5, "1.5"),
    ],
)
def test_desde_values(value, expected):
    assert _desde(value) == expected


@pytest.mark.parametrize("value", [True, [], {}])
def test_desde_of_wrong_json_type(value):
    with pytest.raises(LoyaltyError) as caught:
        _desde(value)
    assert caught.value.codigo is CodigoError.SOLICITUD_INVALIDA
