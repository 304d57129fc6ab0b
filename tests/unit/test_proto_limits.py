"""The proto files' comments quote limits that live in code (they cannot import them):
each figure is compared with its constant here, and a new figure in a comment must be
tied to one (or be no limit: an HTTP status, an example) before this passes."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from loyalty_grpc.api.requests import MAX_ID_EXTERNO, MAX_LABEL
from loyalty_grpc.domain import (
    amounts,
    codes,
    programs,
    rate_limit,
    redeem,
    requests,
    roster,
    timestamps,
)
from loyalty_grpc.services.backoffice.points import AJUSTE_MAX

PROTO = Path(__file__).resolve().parents[2] / "proto" / "loyalty" / "v1"
POS, BACKOFFICE = "pos_service.proto", "backoffice_service.proto"

# (file, pattern, what each group must read): every pattern matches at least once.
RULES: list[tuple[str, str, Callable[[], str]]] = [
    (POS, r"over (\d+) calls a minute per key", lambda: str(rate_limit.DEFAULT_CALLS_PER_MINUTE)),
    (POS, r"(\d+) h ahead", lambda: str(timestamps.MAX_ADELANTO // timedelta(hours=1))),
    (POS, r"(?:over|up to) (\d+) codes", lambda: str(redeem.MAX_CODIGOS)),
    (POS, r"at most (\d+) per call", lambda: str(codes.MAX_CODES_PER_CALL)),
    (POS, r"Each code at most (\d+) chars", lambda: str(codes.MAX_CODE_LENGTH)),
    (
        POS,
        r"idempotency key \(per program and mode\), at most (\d+) chars",
        lambda: str(MAX_ID_EXTERNO),
    ),
    (POS, r"(?:Point of sale|Venue)[^.;]*?, at most (\d+) chars", lambda: str(MAX_LABEL)),
    (POS, r"default (\d+), values over", lambda: str(roster.LIMITE_DEFAULT)),
    (POS, r"values over (\d+) served as (\d+)", lambda: str(roster.LIMITE_MAX)),
    (POS, r"\(>= 10\^(\d+)\)", lambda: str(len(str(timestamps.EPOCH_MS_DESDE)) - 1)),
    (POS, r"cents x program rate / (\d+)\)", lambda: str(int(amounts._CIEN))),
    (POS, r"currency prefix \(([^)]*)\)", lambda: ", ".join(amounts.DELANTE)),
    (BACKOFFICE, r"below ([\d,]+),", lambda: f"{int(programs.TASA_MAX):,}"),
    (
        BACKOFFICE,
        r"at most (\d+) decimals",
        lambda: str(-int(programs.TASA_STEP.as_tuple().exponent)),
    ),
    (BACKOFFICE, r"at most ([\d,]+) either way", lambda: f"{AJUSTE_MAX:,}"),
    (BACKOFFICE, r"At most (\d+) codes per call", lambda: str(codes.MAX_CODES_PER_CALL)),
    (BACKOFFICE, r"1-(\d+) letters, digits", lambda: str(requests.MAX_REQUEST_ID)),
]
# Figures in the comments that are no limit: ISO 8601, an example year, HTTP statuses,
# amounts of an example, the first native field's number, SHA-256, AIP-155 (request ids).
NOT_LIMITS = {
    "8601", "2018", "404", "409", "422", "1234", "56", "1,234", "20", "10", "256", "155"
}  # fmt: skip
_NUMBER = re.compile(r"(?<![\w.,^])\d(?:[\d,]*\d)?(?![\w])")


def comments(name: str) -> str:
    """The `//` comments of a proto file as one line of text."""
    text = (PROTO / name).read_text(encoding="utf-8")
    return " ".join(" ".join(re.findall(r"//(.*)", text)).split())


@pytest.mark.parametrize(("name", "pattern", "value"), RULES, ids=[r[1] for r in RULES])
def test_each_figure_of_a_comment_is_its_constants(
    name: str, pattern: str, value: Callable[[], str]
) -> None:
    found = [group for match in re.finditer(pattern, comments(name)) for group in match.groups()]
    assert found, f"{name}: no {pattern!r} any more: update RULES"
    assert set(found) == {value()}, f"{name}: {pattern!r} reads {found}, the code {value()}"


@pytest.mark.parametrize("name", [POS, BACKOFFICE])
def test_every_figure_of_the_comments_is_tied(name: str) -> None:
    """Numbers of two digits or more outside every rule's match, and not in NOT_LIMITS."""
    text = comments(name)
    covered = [
        match.span()
        for file, pattern, _ in RULES
        if file == name
        for match in re.finditer(pattern, text)
    ]
    loose = [
        number.group()
        for number in _NUMBER.finditer(text)
        if len(number.group()) > 1
        and number.group() not in NOT_LIMITS
        and not any(start <= number.start() < end for start, end in covered)
    ]
    assert loose == [], f"{name}: figures not tied to a constant: {loose}"
