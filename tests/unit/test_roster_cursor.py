"""Roster cursors (domain/roster_cursor.py): opaque, URL-safe, bound to the program and
to the cluster that issued them; anything else is cursor_invalido (version 1 cursors with a
detalle of their own). Also the edge's `limite` and `desde` rules
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
    MAX_SISTEMA,
    Cursor,
    Fase,
    Posicion,
    check_issued,
    decode_cursor,
    encode_cursor,
    sistema_of,
)

positions = st.builds(
    Posicion, st.sampled_from(Fase), st.integers(0, MAX_POSITION), st.integers(0, MAX_POSITION)
)
cursors = st.builds(Cursor, st.integers(0, MAX_SISTEMA), positions)
SISTEMA = 7_301_234_567_890_123_456  # a system identifier, as PostgreSQL makes them


def cur(fase: Fase, xid: int, pk: int, sistema: int = SISTEMA) -> Cursor:
    return Cursor(sistema, Posicion(fase, xid, pk))


programs = st.text(min_size=1, max_size=40)


def invalid(programa: str, text: str) -> LoyaltyError:
    with pytest.raises(LoyaltyError) as caught:
        decode_cursor(programa, text)
    assert caught.value.codigo is CodigoError.CURSOR_INVALIDO
    return caught.value


@given(programs, cursors)
def test_round_trip_url_safe_fixed_length(programa, cursor):
    text = encode_cursor(programa, cursor)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", text)
    assert len(text) == CURSOR_LENGTH
    assert decode_cursor(programa, text) == cursor


@given(programs, programs, cursors)
def test_another_programs_cursor_is_refused(a, b, cursor):
    if a == b:
        return
    error = invalid(b, encode_cursor(a, cursor))
    assert "desde" in error.detalle


def test_program_binding_is_exact():
    cursor = encode_cursor("halcones", cur(Fase.CAMBIOS, 1000, 5))
    for other in ("Halcones", "halcones ", "halcone", "halcones2", ""):
        invalid(other, cursor)


@given(cursors, st.integers(0, CURSOR_LENGTH - 1), st.sampled_from("A_-z09"))
def test_any_changed_character_is_refused(cursor, where, char):
    text = encode_cursor("p", cursor)
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
    text = encode_cursor("p", cur(Fase.FOTO, 7, 9))
    invalid("p", text[:-1])
    invalid("p", text + "=")
    invalid("p", text + "A")
    invalid("p", " " + text[1:])


def test_standard_base64_alphabet_is_refused():
    # Find a cursor whose text has '-' or '_' and spell it with '+' / '/'.
    for pk in range(1000):
        text = encode_cursor("p", cur(Fase.CAMBIOS, 2**40 + pk, pk))
        if "-" in text or "_" in text:
            invalid("p", text.replace("-", "+").replace("_", "/"))
            return
    pytest.fail("no cursor with - or _ found")


def test_non_canonical_last_character_is_refused():
    """base64 ignores the unused low bits of the last character; a cursor has exactly one
    spelling."""
    text = encode_cursor("p", cur(Fase.CAMBIOS, 3, 4))
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(text[-1])
    sibling = text[:-1] + alphabet[last ^ 1]
    invalid("p", sibling)


def _forge(programa: str, version: int, fase: int, sistema: int, xid: int, pk: int) -> str:
    """A cursor with a correct tag but a body the service never writes."""
    body = struct.pack(">BBQQQ", version, fase, sistema, xid, pk)
    return _tagged(programa, body)


def _tagged(programa: str, body: bytes) -> str:
    tag = hashlib.sha256(
        b"loyalty roster cursor\x00" + programa.encode() + b"\x00" + body
    ).digest()[:8]
    return base64.urlsafe_b64encode(body + tag).rstrip(b"=").decode()


def _version_1(programa: str, fase: int, xid: int, pk: int) -> str:
    """A cursor of the previous format (version 1: no system identifier), as it issued them."""
    return _tagged(programa, struct.pack(">BBQQ", 1, fase, xid, pk))


def test_forge_helper_matches_the_format():
    assert _forge("p", 2, 2, SISTEMA, 10, 20) == encode_cursor("p", cur(Fase.CAMBIOS, 10, 20))


@pytest.mark.parametrize(
    ("version", "fase", "xid", "pk"),
    [
        (3, 2, 10, 20),
        (1, 2, 10, 20),
        (0, 2, 10, 20),
        (2, 0, 10, 20),
        (2, 3, 10, 20),
        (2, 2, 2**63, 20),
        (2, 1, 10, 2**64 - 1),
    ],
)
def test_unknown_version_phase_or_out_of_range_is_refused(version, fase, xid, pk):
    error = invalid("p", _forge("p", version, fase, SISTEMA, xid, pk))
    assert "versión de cursor desconocida" in error.detalle


def test_version_1_cursor_is_refused_saying_why():
    """The previous format (35 characters, issued before the upgrade) cannot say which
    database issued it: refused with its own detalle; the same text for another program
    is an ordinary foreign cursor."""
    old = _version_1("p", 2, 1000, 5)
    assert len(old) == 35
    error = invalid("p", old)
    assert "versión anterior" in error.detalle
    assert old not in error.detalle
    assert "versión anterior" not in invalid("q", old).detalle


def test_system_identifier_round_trips_unsigned():
    """PostgreSQL shows system_identifier as a signed bigint; the cursor holds it unsigned."""
    for shown in (0, 1, 2**63 - 1, -1, -(2**63)):
        unsigned = sistema_of(shown)
        assert 0 <= unsigned <= MAX_SISTEMA
        text = encode_cursor("p", cur(Fase.CAMBIOS, 5, 6, unsigned))
        assert decode_cursor("p", text).sistema == unsigned
    assert sistema_of(-1) == 2**64 - 1


def test_check_issued():
    cursor = cur(Fase.CAMBIOS, 10, 20)
    check_issued(cursor, SISTEMA, emitido=True)
    with pytest.raises(LoyaltyError) as other_cluster:
        check_issued(cursor, SISTEMA + 1, emitido=True)
    assert "otra base de datos" in other_cluster.value.detalle
    with pytest.raises(LoyaltyError) as not_issued:
        check_issued(cursor, SISTEMA, emitido=False)
    assert "no emitió" in not_issued.value.detalle
    for caught in (other_cluster.value, not_issued.value):
        assert caught.codigo is CodigoError.CURSOR_INVALIDO
        assert caught.detalle.startswith("desde: ")
        assert str(SISTEMA) not in caught.detalle


def test_position_range_is_checked_on_encode():
    with pytest.raises(ValueError, match="out of range"):
        Posicion(Fase.CAMBIOS, -1, 0)
    with pytest.raises(ValueError, match="out of range"):
        Posicion(Fase.FOTO, 0, 2**63)
    with pytest.raises(ValueError, match="out of range"):
        Cursor(-1, Posicion(Fase.FOTO, 0, 0))
    with pytest.raises(ValueError, match="out of range"):
        Cursor(2**64, Posicion(Fase.FOTO, 0, 0))


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
