"""The README's first commands are ./dev's own (its help, `./dev help`), with the same
expected durations, and CI runs exactly the full one."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _help() -> dict[str, str]:
    """./dev's help lines (its first comment block): command -> what it does."""
    lines = (ROOT / "dev").read_text().splitlines()[1:]
    block = lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))]
    found = [re.fullmatch(r"#   (\./dev \S+(?: --\S+)?)\s{2,}(.+)", line) for line in block]
    return {match.group(1): match.group(2) for match in found if match}


def _readme_commands() -> dict[str, str]:
    """The README's first sh block: command -> its comment."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```sh\n(.*?)```", readme, re.DOTALL)
    assert block, "README.md has no sh block"
    return dict(re.findall(r"^(\./dev .*?)\s+# (.+)$", block.group(1), re.MULTILINE))


def _duration(text: str) -> str | None:
    found = re.search(r"\((~[^)]*min[^)]*)\)", text)
    return found.group(1) if found else None


def test_the_readme_names_the_commands_of_dev_with_their_durations() -> None:
    help_lines, readme = _help(), _readme_commands()
    assert list(readme) == ["./dev up --demo", "./dev test", "./dev quick"]
    for command, comment in readme.items():
        assert command in help_lines, f"{command} is not in ./dev's help"
        assert _duration(comment) == _duration(help_lines[command])
    assert _duration(readme["./dev test"]) is not None
    assert _duration(readme["./dev quick"]) is not None


def test_ci_runs_exactly_the_full_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert script[-1] == "./dev test"
