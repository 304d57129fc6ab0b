"""Figures the hand-written docs quote from the code (issue 26 §3): the call limit and its
slack in docs/rate-limit.md and in the limit's module docs, the commands' default ports,
host and data dir in docs/cli.md, the default ports in docs/clients.md's examples. Each is
compared with its home, so a changed default fails here until the prose follows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loyalty_grpc.api.server_defaults import DEFAULT_HOST
from loyalty_grpc.domain.rate_limit import DEFAULT_CALLS_PER_MINUTE, slack
from loyalty_grpc.runtime.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LIMIT = DEFAULT_CALLS_PER_MINUTE


def _read(name: str) -> str:
    """A docs page by its name, or a module by its path from the root."""
    path = ROOT / name if "/" in name else DOCS / name
    return (
        " ".join(path.read_text(encoding="utf-8").split())
        if "/" in name
        else (path.read_text(encoding="utf-8"))
    )


# (page, pattern, what each group must read): every pattern matches at least once.
RULES: list[tuple[str, str, str]] = [
    ("rate-limit.md", r"^(\d+) calls per API key in any 60 s", str(LIMIT)),
    ("rate-limit.md", r"`limit // 60 − 2` \((\d+) for (\d+)\)", f"{slack(LIMIT)} {LIMIT}"),
    ("rate-limit.md", r"at most (\d+) granted", str(slack(LIMIT))),
    ("rate-limit.md", r"before (\d+) calls were admitted", str(LIMIT - slack(LIMIT))),
    ("rate-limit.md", r"after (\d+) when one at a time, then exactly (\d+)",
     f"{LIMIT - slack(LIMIT)} {LIMIT}"),
    ("rate-limit.md", r"gets all (\d+)\)", str(LIMIT)),
    ("rate-limit.md", r"and exactly\s+(\d+) get through", str(LIMIT)),
    ("rate-limit.md", r"q=(\d+);w=60", str(LIMIT)),
    ("rate-limit.md", r"At (\d+) a minute a key's batches are at most (\d+) calls",
     f"{LIMIT} {1 + slack(LIMIT)}"),
    ("cli.md", r"--http-port (\d+)\]", str(Settings.http_port)),
    ("cli.md", r"--grpc-port (\d+)\]", str(Settings.grpc_port)),
    ("cli.md", r"--grpc-host ([\d.]+)\]", DEFAULT_HOST),
    ("cli.md", r"--metrics-port (\d+)\]", str(Settings.metrics_port)),
    ("cli.md", r"--data-dir (\.\w+)\]", str(Settings.data_dir)),
    ("clients.md", r"127\.0\.0\.1:(\d+)\"", str(Settings.grpc_port)),
    ("clients.md", r"-plaintext 127\.0\.0\.1:(\d+)", str(Settings.grpc_port)),
    ("clients.md", r"http://(?:localhost|127\.0\.0\.1):(\d+)", str(Settings.http_port)),
    # Module docs: their worked example of the slack (one line: line breaks read as spaces).
    ("src/loyalty_grpc/services/rate_limit.py", r"limit // 60 - 2, (\d+) for (\d+)\)",
     f"{slack(LIMIT)} {LIMIT}"),
    ("src/loyalty_grpc/services/rate_limit.py", r"with (\d+), no call is refused before (\d+)",
     f"{LIMIT} {LIMIT - slack(LIMIT)}"),
    ("src/loyalty_grpc/domain/rate_limit.py", r"spec: (\d+) calls a minute", str(LIMIT)),
    ("src/loyalty_grpc/domain/rate_limit.py", r"limit // 60 - 2: (\d+) for (\d+),",
     f"{slack(LIMIT)} {LIMIT}"),
    ("src/loyalty_grpc/domain/rate_limit.py", r"refused only once (\d+) calls",
     str(LIMIT - slack(LIMIT))),
]  # fmt: skip


@pytest.mark.parametrize(("page", "pattern", "value"), RULES, ids=[r[1] for r in RULES])
def test_a_figure_in_the_docs_is_its_constant(page: str, pattern: str, value: str) -> None:
    found = [" ".join(m.groups()) for m in re.finditer(pattern, _read(page), re.MULTILINE)]
    assert found, f"{page}: no {pattern!r} any more: update RULES"
    assert set(found) == {value}, f"{page}: {pattern!r} reads {found}, the code {value}"


def test_the_rate_limit_page_quotes_no_other_figure_of_the_limit() -> None:
    """Any other mention of the limit's figures on the page must be one of the rules'."""
    text = _read("rate-limit.md")
    covered = [
        m.span() for page, pattern, _ in RULES if page == "rate-limit.md"
        for m in re.finditer(pattern, text, re.MULTILINE)
    ]  # fmt: skip
    figures = {str(LIMIT), str(LIMIT - slack(LIMIT))}
    loose = [
        m.group()
        for m in re.finditer(r"(?<![\w.])\d+(?![\w.])", text)
        if m.group() in figures and not any(a <= m.start() < b for a, b in covered)
    ]
    assert loose == [], f"rate-limit.md: {loose} not tied to a rule"
