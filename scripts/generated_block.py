"""A block of a hand-written file that a script writes from a single source, between a
`BEGIN` and an `END` marker line (gen_request_check.py, gen_envelope.py, gen_edge.py):
rewrite it in place, or (`--check`) exit 1 when it is stale."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path


def replace_block(text: str, begin: str, end: str, fresh: str, name: str) -> str:
    """`text` with everything from `begin` to `end` (markers included) replaced by `fresh`."""
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"{name} lacks the {begin} ... {end} markers")
    return pattern.sub(lambda _: fresh, text, count=1)


def main(path: Path, render: Callable[[str], str], *, doc: str, what: str, script: str) -> int:
    """The command line of a generator: `render(text)` is the file with a fresh block."""
    return main_many([(path, render, what)], doc=doc, script=script)


def main_many(files: list[tuple[Path, Callable[[str], str], str]], *, doc: str, script: str) -> int:
    """`main` for a generator that writes a block in each of several files: (path,
    render, what the block is)."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--check", action="store_true", help="fail when a block is stale")
    args = parser.parse_args()
    stale = 0
    for path, render, what in files:
        text = path.read_text(encoding="utf-8")
        fresh = render(text)
        shown = path.relative_to(path.parents[1])
        if args.check:
            if fresh != text:
                print(f"{shown} is stale: run python scripts/{script}")
                stale = 1
            else:
                print(f"{shown} is fresh")
            continue
        path.write_text(fresh, encoding="utf-8")
        print(f"wrote the {what} block of {shown}")
    return stale
