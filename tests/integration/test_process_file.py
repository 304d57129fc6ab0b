"""The processes file that `loyalty status` reads (runtime/process/process_file.py): written by the
supervising process at every change, summarised for an operator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from loyalty_grpc.runtime.process.process_file import (
    FILE_NAME,
    ProcessFile,
    Writer,
    live_writer,
    summary,
)
from loyalty_grpc.runtime.process.supervision import Child, State
from tests.simulated_processes import Clock, Fake, Spawner


def _children() -> list[Child]:
    clock = Clock()
    worker = Child("worker 0", "worker", Spawner(), start_timeout=60, clock=clock)
    envoy = Child("envoy", "envoy", Spawner(), start_timeout=60, clock=clock)
    for child in (worker, envoy):
        child.start()
        child.tick()
        child.tick()
    return [worker, envoy]


def test_written_at_every_change_and_summarised(tmp_path: Path):
    table = ProcessFile.in_dir(tmp_path, "up")
    worker, envoy = _children()
    table.children = [worker, envoy]
    table.write()
    found = summary(tmp_path)
    assert found is not None
    assert found.ok
    assert found.processes.startswith("loyalty up (pid ")
    assert found.processes.endswith("): worker 0 serving, envoy serving")
    assert found.restarts == "worker 0, envoy 0"

    assert isinstance(envoy.handle, Fake)
    envoy.handle.code = -9
    envoy._clock.now += 5  # type: ignore[attr-defined]
    envoy.tick()
    envoy.tick()
    table.write()
    found = summary(tmp_path, now=time.time() + 3)
    assert found is not None
    assert found.restarts.startswith("worker 0, envoy 1; last: envoy (pid ")
    assert found.restarts.endswith("killed by SIGKILL after serving 5.0 s, 3 s ago")


def test_a_child_waiting_for_a_restart_is_unhealthy(tmp_path: Path):
    table = ProcessFile.in_dir(tmp_path, "serve")
    worker, _ = _children()
    worker.state = State.WAITING
    table.children = [worker]
    table.write()
    found = summary(tmp_path)
    assert found is not None
    assert not found.ok
    assert "worker 0 waiting" in found.processes


def test_a_killed_supervisor_and_no_file(tmp_path: Path):
    assert summary(tmp_path) is None
    (tmp_path / FILE_NAME).write_text(
        json.dumps({"command": "up", "pid": 2**22 + 1, "started": 0, "children": []})
    )
    found = summary(tmp_path)
    assert found is not None
    assert not found.ok
    assert "is not running: it was killed before it could clean up" in found.processes
    (tmp_path / FILE_NAME).write_text("{not json")
    found = summary(tmp_path)
    assert found is not None
    assert not found.ok
    assert found.processes.startswith("unreadable ")


def test_removed_on_a_clean_stop(tmp_path: Path):
    table = ProcessFile.in_dir(tmp_path, "gateway run")
    table.write()
    assert (tmp_path / FILE_NAME).exists()
    table.remove()
    assert summary(tmp_path) is None


def _written_by(tmp_path: Path, pid: int) -> Path:
    (tmp_path / FILE_NAME).write_text(
        json.dumps({"command": "serve", "pid": pid, "started": time.time(), "children": []})
    )
    return tmp_path


def _exec_done(process: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    """`process` once the kernel shows its new command line: Popen returns as soon as the
    exec has replaced the memory, a moment before /proc/PID/cmdline holds the new
    arguments (an empty read then; seen once under a loaded full run)."""
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{process.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "the child never showed its command line"
        time.sleep(0.01)
    return process


def test_a_live_loyalty_writer_is_named_and_anything_else_is_not(tmp_path: Path):
    """What keeps a second `serve` out of a data dir: only a live `loyalty` process. A pid
    that belongs to another program now (reused after a crash and a reboot), a dead one,
    or this process itself never keeps the service from starting."""
    assert live_writer(tmp_path) is None  # no file
    sleep = [sys.executable, "-c", "import sys, time; time.sleep(60)"]
    with (
        subprocess.Popen([*sleep, "loyalty", "serve"]) as loyalty,
        subprocess.Popen([*sleep, "something-else"]) as other,
    ):
        _exec_done(loyalty)
        _exec_done(other)
        try:
            assert live_writer(_written_by(tmp_path, loyalty.pid)) == Writer("serve", loyalty.pid)
            assert live_writer(_written_by(tmp_path, other.pid)) is None
        finally:
            loyalty.kill()
            other.kill()
    assert live_writer(_written_by(tmp_path, loyalty.pid)) is None  # dead
    assert live_writer(_written_by(tmp_path, os.getpid())) is None  # itself


def test_a_worker_not_answering_is_shown_and_unhealthy(tmp_path: Path):
    """Between its first missed health check and its SIGKILL a worker is "not answering
    (N missed checks)" in `loyalty status`, not serving (issue 24 §4)."""
    table = ProcessFile.in_dir(tmp_path, "serve")
    worker, envoy = _children()
    table.children = [worker, envoy]
    worker.note_unanswered(1)
    table.write()
    found = summary(tmp_path)
    assert found is not None
    assert not found.ok
    assert found.processes.endswith("): worker 0 not answering (1 missed check), envoy serving")
    worker.note_unanswered(2)
    table.write()
    found = summary(tmp_path)
    assert found is not None
    assert "worker 0 not answering (2 missed checks)" in found.processes
    worker.note_unanswered(0)
    table.write()
    found = summary(tmp_path)
    assert found is not None
    assert found.ok
    assert found.processes.endswith("): worker 0 serving, envoy serving")
