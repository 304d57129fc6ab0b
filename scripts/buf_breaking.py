"""`buf breaking` of proto/ against the previous commit (`./dev test`, pre-commit): a change
that breaks generated code or the wire (FILE rules, buf.yaml) fails the check.

    python scripts/buf_breaking.py

In a clone without the previous commit (a shallow CI checkout) there is nothing to compare
with: the script says so and passes, as it does on a commit whose parent predates buf.yaml.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUF = Path(sys.executable).with_name("buf")
AGAINST = "HEAD~1"


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def main() -> int:
    if _git("rev-parse", "--verify", "--quiet", f"{AGAINST}^{{commit}}").returncode != 0:
        print(f"buf breaking: no {AGAINST} in this clone (shallow?): nothing to compare with")
        return 0
    if _git("cat-file", "-e", f"{AGAINST}:buf.yaml").returncode != 0:
        print(f"buf breaking: {AGAINST} has no buf.yaml: nothing to compare with")
        return 0
    done = subprocess.run(
        [str(BUF), "breaking", "--against", f".git#ref={AGAINST}"], cwd=ROOT, check=False
    )
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
