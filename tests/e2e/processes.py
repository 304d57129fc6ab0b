"""`loyalty` processes as the end-to-end tests start them: the command, an environment
without the caller's database and admin token, and a process whose output is collected."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest

from tests.support import free_port

LOYALTY = [sys.executable, "-m", "loyalty_grpc.runtime.cli"]
DEMO_KEY = "lp_vivo_DemoCajaPrincipalTodos0000001"
READY_LINE = "Ctrl-C stops everything."


def loyalty_env(**extra: str) -> dict[str, str]:
    """This process's environment without LOYALTY_DATABASE_URL and LOYALTY_ADMIN_TOKEN,
    plus `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LOYALTY_DATABASE_URL", "LOYALTY_ADMIN_TOKEN")
    }
    env.update(extra)
    return env


class Running:
    """A `loyalty` process whose stdout is collected by a thread."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [*LOYALTY, *args],
            cwd=cwd,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"never printed {text!r}:\n" + "\n".join(self.lines))
            time.sleep(0.1)

    def wait_for_workers(self, workers: int, timeout: float = 90) -> None:
        """Until `workers` distinct processes logged, in JSON, that they listen
        (api/server.py): each has built its server."""
        deadline = time.monotonic() + timeout
        while True:
            pids = {
                json.loads(line)["pid"]
                for line in list(self.lines)
                if line.startswith("{") and "gRPC server listening on" in line
            }
            if len(pids) >= workers:
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"{len(pids)} of {workers} workers started:\n" + "\n".join(self.lines[-40:])
                )
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


def demo_up_args(data_dir: Path, http_port: int, *extra: str) -> list[str]:
    """`loyalty up --demo` on `data_dir` and `http_port`, any free gRPC port, no metrics."""
    return [
        "up",
        "--demo",
        "--data-dir",
        str(data_dir),
        "--http-port",
        str(http_port),
        "--grpc-port",
        str(free_port()),
        "--metrics-port",
        "0",
        *extra,
    ]


def serve_args(port: int, workers: int, *extra: str) -> list[str]:
    """`loyalty serve` on 127.0.0.1:`port` with `workers` workers and no metrics."""
    return [
        "serve",
        "--grpc-host",
        "127.0.0.1",
        "--grpc-port",
        str(port),
        "--workers",
        str(workers),
        "--metrics-port",
        "0",
        *extra,
    ]


def worker_processes(parent_pid: int) -> list[psutil.Process]:
    """The live worker processes of a `loyalty` process."""
    found = []
    for child in psutil.Process(parent_pid).children():
        try:
            if "loyalty_grpc.runtime.process.worker" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:  # exited (a zombie until the parent reaps it)
            continue
    return found
