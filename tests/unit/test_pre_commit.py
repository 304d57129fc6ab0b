"""The pre-commit hooks run the same checks, in the same order, as `./dev test` does
before pytest (so a commit that passes its hooks passes CI's lint and type steps)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def dev_checks() -> list[str]:
    """The commands of ./dev's `test)` branch before pytest, as run from the root."""
    script = (ROOT / "dev").read_text()
    branch = re.search(r"\n  test\)\n(.*?)\n    ;;", script, re.DOTALL)
    assert branch, "no test) branch in ./dev"
    commands = [line.strip() for line in branch.group(1).splitlines()]
    assert commands[-1].startswith('exec "$VENV/bin/pytest"')
    return [
        command.replace('"$VENV/bin/', ".venv/bin/").replace('"', "") for command in commands[:-1]
    ]


def test_the_hooks_are_the_dev_checks() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    (repo,) = config["repos"]
    assert repo["repo"] == "local"  # nothing to download
    hooks = repo["hooks"]
    assert [hook["entry"] for hook in hooks] == dev_checks()
    for hook in hooks:
        assert hook["language"] == "system"
        assert hook["pass_filenames"] is False  # whole tree, as ./dev test
        assert hook["always_run"] is True
