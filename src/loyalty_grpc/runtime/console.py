"""Lines for the person running a `loyalty` command (stdout, flushed at once)."""

from __future__ import annotations

import sys


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
