"""Regenerate the parts of the documentation that derive from code: the error catalogue
(docs/errors.md), the configuration table (docs/configuration.md) and the sizing table
(docs/sizing.md).

    python scripts/gen_docs.py           # rewrite those pages in place
    python scripts/gen_docs.py --check   # exit 1 when one is stale
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from loyalty_grpc.domain.errors import CATALOGO
from loyalty_grpc.runtime.settings import config_table
from loyalty_grpc.runtime.sizing import sizing_table

DOCS = Path(__file__).resolve().parents[1] / "docs"


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


# Page -> its marked block (`<!-- name:start -->` … `<!-- name:end -->`) -> what fills it.
BLOCKS: dict[str, tuple[str, Callable[[], str]]] = {
    "errors.md": ("errors", error_table),
    "configuration.md": ("config", config_table),
    "sizing.md": ("sizing", sizing_table),
}


def render(page: str, text: str) -> str:
    name, make = BLOCKS[page]
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"docs/{page} lacks the {start} ... {end} markers")
    block = f"{start}\n{make()}\n{end}"
    return pattern.sub(lambda _: block, text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    stale = 0
    for page in BLOCKS:
        path = DOCS / page
        text = path.read_text(encoding="utf-8")
        fresh = render(page, text)
        if args.check:
            if fresh != text:
                print(f"docs/{page}: its generated table is stale: run python scripts/gen_docs.py")
                stale = 1
            continue
        path.write_text(fresh, encoding="utf-8")
    return stale


if __name__ == "__main__":
    sys.exit(main())
