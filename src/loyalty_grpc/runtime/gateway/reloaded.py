"""What `loyalty gateway reload` chose that outlives a restart of the gateway.

A reload may give the gateway a new folder (`--gateway-dir`) or a new list of servers
(`--upstream`, LOYALTY_GATEWAY_UPSTREAMS). The work directory keeps both in
`reloaded.json`, beside what the start command had said when the reload replaced it;
`clear()` (a clean stop) leaves the file, so that the next start of `gateway run` (or
`up`) on that work directory, by systemd's `Restart=`, a reboot or an operator, serves
what the last reload applied.

Each of the two is decided on its own, and the latest decision wins:

- the start command says what it said when the reload replaced it (the unit's
  `ExecStart` and environment file unchanged): the reload's value stands;
- the start command says something else (the operator changed the unit or its
  environment file since): the start command's value stands, and the reload's is
  forgotten.

The start says which applies, on its first lines (`resume`'s note).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from loyalty_grpc.runtime.gateway.config import GatewaySpec
from loyalty_grpc.runtime.gateway.shape import EnvoyError
from loyalty_grpc.runtime.gateway.xds import write_atomic

T = TypeVar("T")

FILE_NAME = "reloaded.json"


@dataclass(frozen=True)
class Choice:
    """The two things a reload can change."""

    gateway_dir: Path
    upstreams: tuple[str, ...]

    @classmethod
    def of(cls, spec: GatewaySpec) -> Choice:
        return cls(spec.gateway_dir, tuple(spec.upstreams))

    def to_json(self) -> dict[str, object]:
        return {"gateway_dir": str(self.gateway_dir), "upstreams": list(self.upstreams)}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Choice:
        upstreams = data["upstreams"]
        if not isinstance(upstreams, list):
            raise TypeError("upstreams is not a list")
        return cls(Path(str(data["gateway_dir"])), tuple(str(item) for item in upstreams))


@dataclass(frozen=True)
class Record:
    """What the start command said (`started`) and what the last reload applied in its
    place (`reloaded`), at `at` (time.time())."""

    started: Choice
    reloaded: Choice
    at: float

    def to_json(self) -> str:
        return json.dumps(
            {
                "started": self.started.to_json(),
                "reloaded": self.reloaded.to_json(),
                "at": self.at,
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> Record:
        data = json.loads(text)
        return cls(
            Choice.from_json(data["started"]),
            Choice.from_json(data["reloaded"]),
            float(data["at"]),
        )


def record_path(work_dir: Path) -> Path:
    return work_dir / FILE_NAME


def load(work_dir: Path) -> Record | None:
    """The record in `work_dir`; None when there is none. EnvoyError when it is damaged:
    guessing which folder to serve is not safe."""
    path = record_path(work_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return Record.from_json(text)
    except (ValueError, TypeError, KeyError) as exc:
        raise EnvoyError(
            f"{path} is damaged ({exc}): delete it to serve what the start command says"
        ) from None


def save(work_dir: Path, record: Record | None) -> None:
    """Write the record (None, or nothing reloaded: remove it)."""
    path = record_path(work_dir)
    if record is None or record.started == record.reloaded:
        path.unlink(missing_ok=True)
        return
    write_atomic(path, (record.to_json() + "\n").encode())


def note_reload(work_dir: Path, running: GatewaySpec, applied: GatewaySpec) -> None:
    """After a reload took `applied` in place of `running`: remember what the start
    command said (the earlier record's, else what ran) and what the reload applied.
    Called with the work directory locked."""
    earlier = load(work_dir)
    started = earlier.started if earlier is not None else Choice.of(running)
    save(work_dir, Record(started, Choice.of(applied), time.time()))


@dataclass(frozen=True)
class Resumed:
    """What a start serves (`spec`), the lines that say why (`notes`), and the record to
    keep once it serves (`commit`)."""

    spec: GatewaySpec
    notes: tuple[str, ...]
    record: Record | None

    def commit(self, work_dir: Path) -> None:
        """Once this start's Envoy runs: the record, in terms of this start's command."""
        if self.record is not None:
            save(work_dir, self.record)


def resume(spec: GatewaySpec, work_dir: Path) -> Resumed:
    """`spec` as the start command says, with what a reload chose since, by the rules of
    the module doc. Changes nothing on disk (`Resumed.commit` does). EnvoyError when the
    record is damaged."""
    record = load(work_dir)
    if record is None:
        return Resumed(spec, (), None)
    command = Choice.of(spec)
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(record.at))
    notes: list[str] = []

    def decide(what: str, started: T, reloaded: T, commanded: T, show: Callable[[T], str]) -> T:
        """One setting: the reload's value while the start command still says what the
        reload replaced; the command's when it changed since (the reload no longer
        applies). A note for either."""
        if reloaded == started:
            return commanded
        if commanded == started:
            notes.append(
                f"{what} {show(reloaded)}, set by `gateway reload` at {when} (the start "
                f"command says {show(commanded)}: put the new value in it to make this "
                "permanent)"
            )
            return reloaded
        notes.append(
            f"{what} {show(commanded)} as the start command says: it changed since "
            f"`gateway reload` set {show(reloaded)} at {when}, which no longer applies"
        )
        return commanded

    gateway_dir = decide(
        "gateway folder",
        record.started.gateway_dir,
        record.reloaded.gateway_dir,
        command.gateway_dir,
        str,
    )
    upstreams = decide(
        "upstreams",
        record.started.upstreams,
        record.reloaded.upstreams,
        command.upstreams,
        ", ".join,
    )
    return Resumed(
        dataclasses.replace(spec, gateway_dir=gateway_dir, upstreams=upstreams),
        tuple(notes),
        Record(command, Choice(gateway_dir, upstreams), record.at),
    )


__all__ = [
    "FILE_NAME",
    "Choice",
    "Record",
    "Resumed",
    "load",
    "note_reload",
    "record_path",
    "resume",
]
