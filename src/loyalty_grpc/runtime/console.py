"""Lines for the person running a `loyalty` command (stdout, flushed at once), and how to
name a command to them."""

from __future__ import annotations

import sys

from loyalty_grpc.runtime.settings import program_name


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def program() -> str:
    """The command as the person types it: `./dev` under ./dev (which sets LOYALTY_PROG:
    the project's `.venv/bin/loyalty` is not on the PATH), else `loyalty`."""
    return program_name()


def command(words: str) -> str:
    """A command line to suggest, e.g. `command("migrate")` → `./dev migrate`."""
    return f"{program()} {words}"
