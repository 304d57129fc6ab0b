"""What a `detalle` may hold (domain/detalle.py): one function shows a client's value, every
LoyaltyError's detalle is bounded, and the gateway's limit is the same number."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loyalty_grpc.api.errors import envelope, to_grpc_status
from loyalty_grpc.domain.detalle import ELLIPSIS, HEAD, MAX_DETALLE, MAX_SHOWN, bounded, shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError

LUA = Path(__file__).resolve().parents[2] / "gateway" / "envelope.lua"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("HD-0001", '"HD-0001"'),
        ("", '""'),
        ("X" * MAX_SHOWN, '"' + "X" * MAX_SHOWN + '"'),
        ("X" * (MAX_SHOWN + 1), '"' + "X" * MAX_SHOWN + '"…'),
        ("X" * 13_003, '"' + "X" * MAX_SHOWN + '"…'),
        ("hd-d\u0131sp-0001", '"hd-d\\u0131sp-0001"'),  # a look-alike is visible
        ("\u212aIKI", '"\\u212aIKI"'),
        ("A\u200bB\ufeff", '"A\\u200bB\\ufeff"'),  # so is an invisible character
        ('a"b\\c\n\x00', '"a\\"b\\\\c\\n\\u0000"'),
        ("\U0001f600", '"\\ud83d\\ude00"'),
    ],
)
def test_shown(value, expected):
    assert shown(value) == expected


def test_shown_never_cuts_an_escape_in_half():
    # 31 plain characters leave room for one more, not for a 6-character escape.
    assert shown("x" * 31 + "ñ") == '"' + "x" * 31 + '"…'
    assert shown("x" * 26 + "ñ") == '"' + "x" * 26 + '\\u00f1"'
    assert shown("x" * 26 + "ññ") == '"' + "x" * 26 + '\\u00f1"…'


def test_shown_without_quotes():
    assert shown("Club Médico", quote=False) == "Club M\\u00e9dico"
    assert shown("Z" * 40, quote=False) == "Z" * MAX_SHOWN + "…"


@given(st.text(max_size=200))
def test_shown_is_short_ascii_and_one_line(value):
    text = shown(value)
    assert text.removesuffix(ELLIPSIS).isascii()
    assert "\n" not in text
    assert "\r" not in text
    assert len(text) <= MAX_SHOWN + 2 + len(ELLIPSIS)
    assert text.endswith(ELLIPSIS) is (shown(value) != f'"{_escaped(value)}"')


def _escaped(value: str) -> str:
    import json

    return json.dumps(value)[1:-1]


def test_bounded_keeps_the_start_and_the_end():
    assert bounded("x" * MAX_DETALLE) == "x" * MAX_DETALLE
    long = "programas[0].fans[3]" + "." * 1000 + "correo: falta el campo"
    cut = bounded(long)
    assert len(cut) == MAX_DETALLE
    assert cut.startswith("programas[0].fans[3]")
    assert cut.endswith("correo: falta el campo")
    assert ELLIPSIS in cut


def test_every_loyalty_error_is_bounded():
    error = LoyaltyError(CodigoError.MONEDA_NO_SOPORTADA, "moneda: " + "X" * 100_000)
    assert len(error.detalle) == MAX_DETALLE
    assert len(str(error)) < MAX_DETALLE + 40


def test_the_metadata_of_an_error_stays_small_whatever_its_detalle():
    """The detalle travels three times (status message, ErrorInfo, x-envelope); with the
    worst characters (each escaped as a surrogate pair in the envelope) the whole trailing
    metadata stays a few KB, far below Envoy's and gRPC's header limits."""
    worst = LoyaltyError(CodigoError.SOLICITUD_INVALIDA, "\U0001f600" * 100_000)
    status = to_grpc_status(worst, for_gateway=True)
    size = sum(len(k) + len(v) for k, v in status.trailing_metadata) + len(status.details)
    assert size < 16 * 1024
    assert len(envelope(worst)) < 4 * 1024


def test_the_gateway_follows_the_same_rules():
    """gateway/envelope.lua bounds every detalle it writes and shows a client's value (a
    method, a path) with the same figures as the server, so a client sees one limit
    whoever answered: scripts/gen_edge.py writes them into its EDGE block from here (once;
    tests/integration/test_generated_fresh.py keeps the block fresh, and
    tests/e2e/test_gateway_errors.py compares what the gateway shows with `shown`)."""
    text = LUA.read_text(encoding="utf-8")
    found = re.findall(
        r"^local MAX_DETALLE, DETALLE_HEAD = (\d+), (\d+)$\n"
        r"^local MAX_SHOWN, ELLIPSIS = (\d+), \"(.)\"$",
        text,
        re.M,
    )
    assert found == [(str(MAX_DETALLE), str(HEAD), str(MAX_SHOWN), ELLIPSIS)]
