"""`loyalty status`'s verdict and exit code (runtime/cli/status.py), as an LSB `status`
action words them: 0 healthy, 1 unhealthy (a supervising process killed with its file
left behind included), 3 not running."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from loyalty_grpc.runtime.cli.status import (
    HEALTHY,
    NOT_RUNNING,
    UNHEALTHY,
    Line,
    Report,
    process_lines,
)
from loyalty_grpc.runtime.process.process_file import FILE_NAME
from loyalty_grpc.runtime.server_health import nothing_listens


def test_the_verdict_and_its_exit_code() -> None:
    good, bad = Line("a", "fine"), Line("b", "wrong", ok=False)
    assert Report([good], running=True).verdict() == ("healthy", HEALTHY) == ("healthy", 0)
    assert Report([good, bad], running=True).verdict() == ("UNHEALTHY", UNHEALTHY)
    assert UNHEALTHY == 1
    # Not running is said whatever else a line says (a ledger check still shows its mark).
    assert Report([good, bad], running=False).verdict() == ("not running", NOT_RUNNING)
    assert NOT_RUNNING == 3


def _dead_pid() -> int:
    with subprocess.Popen([sys.executable, "-c", "pass"]) as child:
        child.wait()
        return child.pid


def test_a_processes_file_makes_it_running_even_when_its_writer_was_killed(
    tmp_path: Path,
) -> None:
    part = process_lines(tmp_path, tmp_path / "envoy")
    assert not part.present
    assert [line.ok for line in part.lines] == [True]
    (tmp_path / FILE_NAME).write_text(
        json.dumps({"command": "up", "pid": _dead_pid(), "started": 0, "children": []}),
        encoding="utf-8",
    )
    part = process_lines(tmp_path, tmp_path / "envoy")
    assert part.present  # killed, its file left behind: UNHEALTHY, not "not running"
    assert not part.lines[0].ok
    assert "it was killed before it could clean up" in part.lines[0].value


def test_nothing_listens_only_when_the_port_refuses() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        target = f"127.0.0.1:{listening.getsockname()[1]}"
        assert not nothing_listens(target)
    assert nothing_listens(target)
