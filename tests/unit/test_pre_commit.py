"""The pre-commit hooks run the same checks, in the same order, as `./dev test` (and
`./dev quick`) do before pytest (so a commit that passes its hooks passes CI's lint and
type steps)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def dev_checks() -> list[str]:
    """The commands of ./dev's `checks` function, as run from the root: what its `test`
    and `quick` branches both run before pytest."""
    script = (ROOT / "dev").read_text()
    body = re.search(r"\nchecks\(\) \{\n(.*?)\n\}\n", script, re.DOTALL)
    assert body, "no checks() function in ./dev"
    for branch in ("test", "quick"):
        found = re.search(rf"\n  {branch}\)\n(.*?)\n    ;;", script, re.DOTALL)
        assert found, f"no {branch}) branch in ./dev"
        lines = [line.strip() for line in found.group(1).splitlines()]
        steps = [line for line in lines if line and not line.startswith("#")]
        assert steps[0] == "checks"
        assert steps[-1].startswith('exec "$VENV/bin/pytest"')
    return [
        line.strip().replace('"$VENV/bin/', ".venv/bin/").replace('"', "")
        for line in body.group(1).splitlines()
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
