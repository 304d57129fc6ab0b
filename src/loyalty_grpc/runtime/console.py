"""Lines for the person running a `loyalty` command (stdout, flushed at once), and how to
name a command to them."""

from __future__ import annotations

import logging
import sys

from loyalty_grpc.runtime.settings import program_name

log = logging.getLogger("loyalty_grpc.runtime")


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def announce(text: str, log_format: str) -> None:
    """A line of a long-running command (`serve`, `gateway run`) for the person or the
    collector reading it: on stdout as is when its logs are text, an INFO log line when they
    are JSON (then every line it writes is JSON)."""
    if log_format == "json":
        log.info("%s", text)
    else:
        say(text)


def program() -> str:
    """The command as the person types it: `./dev` under ./dev (which sets LOYALTY_PROG:
    the project's `.venv/bin/loyalty` is not on the PATH), else `loyalty`."""
    return program_name()


def command(words: str) -> str:
    """A command line to suggest, e.g. `command("migrate")` → `./dev migrate`."""
    return f"{program()} {words}"
