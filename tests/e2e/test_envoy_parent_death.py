"""Envoy dies with the process that started it (runtime/process/parent_death.py): a parent killed
with SIGKILL runs no cleanup at all, yet leaves no Envoy behind holding its port."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest

from loyalty_grpc.runtime.process.parent_death import ORPHANED_EXIT
from tests.support import free_port

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's"
)

# A parent as `loyalty up` is one: it starts Envoy from its main thread and keeps it.
PARENT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec

    spec = gateway_spec(http_port=int(sys.argv[1]), upstreams=("127.0.0.1:1",),
                        listen_host="127.0.0.1")
    proxy = EnvoyProcess.start_spec(spec, work_dir=Path(sys.argv[2]))
    print(proxy.pid, flush=True)
    time.sleep(300)
""")

# The race: the parent dies after starting the child but before the child sets the signal
# (which would then never come). Simulated by starting the command made for one process
# from another one (a fork of it): to that child, its parent is "already gone".
LATE_CHILD = textwrap.dedent("""
    import os, subprocess, sys
    from loyalty_grpc.runtime.process.parent_death import die_with_parent

    command = die_with_parent([sys.executable, "-c", "print('ran')"])
    same = subprocess.run(command, capture_output=True, text=True)
    print(same.returncode, same.stdout.strip() or "-", same.stderr.strip() or "-", flush=True)
    pid = os.fork()
    if pid == 0:
        other = subprocess.run(command, capture_output=True, text=True)
        print(other.returncode, other.stdout.strip() or "-", other.stderr.strip() or "-",
              flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
""")


def gone(process: psutil.Process, within: float) -> bool:
    """The process exited (a zombie until whoever adopted it reaps it counts)."""
    deadline = time.monotonic() + within
    while True:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_envoy_dies_when_its_parent_is_killed(tmp_path: Path) -> None:
    port = free_port()
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(port), str(tmp_path / "envoy")],
        stdout=subprocess.PIPE,
        text=True,
    )
    envoy: psutil.Process | None = None
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()  # once Envoy serves (empty: the parent failed)
        assert line.strip().isdigit(), f"the parent did not start Envoy: {line!r}"
        envoy = psutil.Process(int(line))
        assert envoy.ppid() == parent.pid
        assert "envoy" in envoy.name()
        assert not port_free(port)

        parent.kill()
        parent.wait(10)

        assert gone(envoy, within=5), "Envoy outlived its parent"
        assert port_free(port)
    finally:
        parent.kill()
        parent.wait(10)
        if parent.stdout is not None:
            parent.stdout.close()
        if envoy is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                envoy.kill()  # only if the test failed (psutil refuses a reused pid)


def test_a_child_whose_parent_is_already_gone_does_not_run() -> None:
    result = subprocess.run(
        [sys.executable, "-c", LATE_CHILD], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.splitlines() == ["0 ran -", f"{ORPHANED_EXIT} - -"]
