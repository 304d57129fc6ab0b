"""The `max_connections` figures of docs/deployment.md ("PostgreSQL for the service") are
runtime/sizing.py's: one `serve` of 2 workers, and two at once (an upgrade's slots)."""

from __future__ import annotations

from pathlib import Path

from loyalty_grpc.runtime.sizing import OPERATOR_CONNECTIONS, serve_connections

DOCS = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"


def test_the_bare_host_figures_follow_the_code():
    prose = " ".join(DOCS.read_text(encoding="utf-8").split())
    one = serve_connections(2)
    two = 2 * one + OPERATOR_CONNECTIONS
    for figure in (
        f"one `serve` opens at most {one} connections",
        f"`max_connections` of at least {one + OPERATOR_CONNECTIONS}",
        f"the two slots of an upgrade need {two} (2 × {one} + {OPERATOR_CONNECTIONS})",
        f"`ALTER SYSTEM SET max_connections = {two}`",
    ):
        assert figure in prose, figure
    assert two > 100  # PostgreSQL's default, which the page says is too few
