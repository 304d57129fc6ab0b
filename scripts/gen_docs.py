"""Regenerate the parts of README.md that derive from code (the error catalogue, the
configuration table).

    python scripts/gen_docs.py           # rewrite README.md in place
    python scripts/gen_docs.py --check   # exit 1 when README.md is stale
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from loyalty_grpc.domain.errors import CATALOGO
from loyalty_grpc.runtime.settings import config_table

README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- errors:start -->", "<!-- errors:end -->"
# Marked block -> what fills it.
BLOCKS: dict[str, Callable[[], str]] = {}


def error_table() -> str:
    rows = ["| HTTP | gRPC | `codigo` | `mensaje` | when |", "|---|---|---|---|---|"]
    rows += [
        f"| {e.http} | {e.grpc} | `{e.codigo}` | {e.mensaje} | {e.cuando} |"
        for e in CATALOGO.values()
        if not e.interno
    ]
    rows += [
        "",
        "Back office only (internal gRPC; `./dev admin` prints them):",
        "",
        "| gRPC | `codigo` | when |",
        "|---|---|---|",
    ]
    rows += [f"| {e.grpc} | `{e.codigo}` | {e.cuando} |" for e in CATALOGO.values() if e.interno]
    return "\n".join(rows)


BLOCKS.update(errors=error_table, config=config_table)


def render(text: str) -> str:
    for name, make in BLOCKS.items():
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
        if not pattern.search(text):
            raise SystemExit(f"README.md lacks the {start} ... {end} markers")
        block = f"{start}\n{make()}\n{end}"
        text = pattern.sub(lambda _, block=block: block, text)  # type: ignore[misc]
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = README.read_text()
    fresh = render(text)
    if args.check:
        if fresh != text:
            print("README.md generated tables are stale: run python scripts/gen_docs.py")
            return 1
        return 0
    README.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
