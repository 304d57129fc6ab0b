"""README.md is read on its own (a repository page, a clone): every relative link in it
points at a file of the repository, and every page of the site it links to has the
heading its anchor names (the site's own links are checked by mkdocs build --strict)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """The anchor GitHub and MkDocs give a heading (lower case, punctuation dropped)."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def test_every_relative_link_of_the_readme_resolves() -> None:
    links = LINK.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(links) > 20
    for link in links:
        if re.match(r"^[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.is_file(), link
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(encoding="utf-8"), re.M)
            assert anchor in {slug(h) for h in headings}, link
