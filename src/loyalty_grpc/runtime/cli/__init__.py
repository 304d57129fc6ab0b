"""The `loyalty` command: its parser (`parser`), running a command (`main`), and one module
per command (`up`, `serve`, `migrate`, `status`, `wallet`, `admin/`); the demo program
`up --demo` loads (`demo`)."""

from __future__ import annotations

from loyalty_grpc.runtime.cli.main import main

__all__ = ["main"]
