"""The processes file, DATA_DIR/processes.json: what a running `loyalty up`, `loyalty serve`
or `loyalty gateway run` supervises, and how often each child was restarted, for
`loyalty status` (which may run in another shell, so it cannot ask the process itself).

The supervising process rewrites it (atomically: a temporary file renamed over it) at every
change of a child's state and removes it when it stops cleanly. A file whose writer is no
longer alive is reported as such: that process was killed and could not clean up.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loyalty_grpc.runtime.process.supervision import Child, State

FILE_NAME = "processes.json"


@dataclass
class ProcessFile:
    """The writer, in the supervising process."""

    path: Path
    command: str
    children: Sequence[Child] = ()
    started: float = 0.0

    @classmethod
    def in_dir(cls, data_dir: Path, command: str) -> ProcessFile:
        return cls(data_dir / FILE_NAME, command, started=time.time())

    def write(self) -> None:
        document = {
            "command": self.command,
            "pid": os.getpid(),
            "started": self.started,
            "children": [_child(child) for child in self.children],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        temporary.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        temporary.replace(self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _child(child: Child) -> dict[str, Any]:
    last = child.last_exit
    return {
        "name": child.name,
        "kind": child.kind,
        "pid": child.pid,
        "state": str(child.state),
        "restarts": child.restarts,
        "unanswered": child.unanswered,
        "last_exit": last.cause if last else None,
        "last_exit_at": last.wall_time if last else None,
    }


# ------------------------------------------------------------------ read by `loyalty status`


@dataclass(frozen=True)
class Summary:
    """Two status lines: what runs, and its restarts."""

    processes: str
    restarts: str
    ok: bool


def summary(data_dir: Path, now: float | None = None) -> Summary | None:
    """What the file in `data_dir` says; None without a file."""
    path = data_dir / FILE_NAME
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return Summary(f"unreadable {path}: {exc}", "unknown", ok=False)
    now = time.time() if now is None else now
    who = f"loyalty {document['command']} (pid {document['pid']}"
    if not alive(int(document["pid"])):
        return Summary(
            f"{who}) is not running: it was killed before it could clean up {path}",
            "unknown",
            ok=False,
        )
    children: list[dict[str, Any]] = document["children"]
    states = ", ".join(f"{c['name']} {_state(c)}" for c in children)
    ok = all(c["state"] == State.SERVING and not c.get("unanswered") for c in children)
    processes = f"{who}, up {ago(now - float(document['started']))}): {states}"
    return Summary(processes, _restarts(children, now), ok)


def _state(child: dict[str, Any]) -> str:
    """`serving`, `starting`, ..., or `not answering (2 missed checks)`: serving, but its
    last health checks went unanswered (it is killed once it missed enough)."""
    missed = int(child.get("unanswered") or 0)
    if child["state"] == State.SERVING and missed:
        return f"not answering ({missed} missed check{'' if missed == 1 else 's'})"
    return str(child["state"])


@dataclass(frozen=True)
class Writer:
    command: str
    pid: int


def live_writer(data_dir: Path) -> Writer | None:
    """The process that writes the file in `data_dir` when it is alive (another process
    supervising from that data dir right now), else None."""
    try:
        document = json.loads((data_dir / FILE_NAME).read_text(encoding="utf-8"))
        writer = Writer(str(document["command"]), int(document["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if writer.pid == os.getpid() or not alive(writer.pid) or not _is_loyalty(writer.pid):
        return None
    return writer


def _is_loyalty(pid: int) -> bool:
    """Whether `pid` runs the `loyalty` command: after a crash and a reboot the file's pid
    may belong to any other process by now, which must not keep the service from starting.
    Without /proc (not Linux), alive is taken to mean it."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return b"loyalty" in command


def _restarts(children: list[dict[str, Any]], now: float) -> str:
    counts: dict[str, int] = {}
    for child in children:
        counts[child["kind"]] = counts.get(child["kind"], 0) + int(child["restarts"])
    text = ", ".join(f"{kind} {count}" for kind, count in counts.items())
    exits = [c for c in children if c["last_exit"]]
    if not exits:
        return text
    last = max(exits, key=lambda c: float(c["last_exit_at"]))
    return f"{text}; last: {last['last_exit']}, {ago(now - float(last['last_exit_at']))} ago"


def alive(pid: int) -> bool:
    """Whether process `pid` exists (someone else's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def ago(seconds: float) -> str:
    """`42 s`, `7 min`, `5 h`, `3 d`."""
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172800:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


__all__ = ["FILE_NAME", "ProcessFile", "Summary", "ago", "alive", "summary"]
