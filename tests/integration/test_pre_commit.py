"""pre-commit itself accepts .pre-commit-config.yaml (`pre-commit validate-config`, run as a
process); tests/unit/test_pre_commit.py checks that its hooks are ./dev's checks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_pre_commit_accepts_the_configuration() -> None:
    pre_commit = shutil.which("pre-commit") or str(ROOT / ".venv" / "bin" / "pre-commit")
    if not Path(pre_commit).exists():
        pytest.fail("pre-commit is not installed (it is a dev dependency: run ./dev)")
    result = subprocess.run(
        [pre_commit, "validate-config", ".pre-commit-config.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
