"""docs/security.md quotes api/edge_limits.py: its table of body limits and the
sizes it names are the module's."""

from __future__ import annotations

import re
from pathlib import Path

from loyalty_grpc.api import edge_limits
from loyalty_grpc.api.edge_limits import BINDINGS

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def number(text: str) -> int:
    return int(text.replace(",", ""))


def test_the_table_of_body_limits_is_the_modules() -> None:
    rows = re.findall(r"^\| `(POST [^`]+)` \| ([\d,]+)[^|]*\| ([\d,]+) \|", DOC.read_text(), re.M)
    assert {binding for binding, _, _ in rows} == {b for b in BINDINGS if b.startswith("POST")}
    for binding, worst, limit in rows:
        assert number(worst) == BINDINGS[binding].worst_case(), binding
        assert number(limit) == BINDINGS[binding].limit, binding


def test_the_figures_it_names_are_the_modules() -> None:
    text = DOC.read_text()
    assert f"The floor, {edge_limits.FLOOR:,} bytes" in text
    assert f"more than {edge_limits.MAX_MEMBERS} members" in text
    assert f"deeper than {edge_limits.MAX_DEPTH}" in text
    assert f"at most 2 ×\n{edge_limits.KNOWN_KEYS:,} entries" in text
    assert edge_limits.KNOWN_KEYS == edge_limits.BLOCKED_ADDRESSES
    assert f"(at most {edge_limits.MAX_BLOCK_SECONDS:,})" in text
    assert f"KNOWN_KEY_SECONDS, {edge_limits.KNOWN_KEY_SECONDS:,}" in text
    assert re.search(rf"\({edge_limits.ESCAPED_CHAR}\s+bytes: an emoji", text)
