"""Lines for the person running a `loyalty` command (stdout, flushed at once), and how to
name a command to them."""

from __future__ import annotations

import os
import sys

# `./dev` runs the project's `.venv/bin/loyalty`, which is not on the PATH, and sets this
# variable to the name it was called by; anywhere else (the Docker image, an installed
# package) the command is `loyalty`.
PROG_VARIABLE = "LOYALTY_PROG"


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def program() -> str:
    """The command as the person types it: `./dev` under ./dev, else `loyalty`."""
    return os.environ.get(PROG_VARIABLE) or "loyalty"


def command(words: str) -> str:
    """A command line to suggest, e.g. `command("migrate")` → `./dev migrate`."""
    return f"{program()} {words}"
