"""Simulated processes and clock for the supervision policy's tests
(runtime/process/supervision.py): no process is started, no time passes."""

from __future__ import annotations

from dataclasses import dataclass, field

from loyalty_grpc.runtime.process.supervision import StartFailed


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Fake:
    """A simulated process: ready after `ready_after` looks, or failing with `fails`."""

    pid: int
    ready_after: int = 2  # not at the look in which it was started
    fails: str | None = None
    code: int | None = None
    looks: int = 0
    killed: bool = False

    def poll(self) -> int | None:
        return self.code

    def ready(self) -> bool:
        if self.fails is not None:
            raise StartFailed(self.fails)
        self.looks += 1
        return self.looks >= self.ready_after

    def kill(self) -> None:
        self.killed = True
        self.code = -9


@dataclass
class Spawner:
    """Hands out the next simulated process; `plan` says how each of them behaves."""

    plan: list[Fake] = field(default_factory=list)
    started: list[Fake] = field(default_factory=list)

    def __call__(self) -> Fake:
        fake = self.plan.pop(0) if self.plan else Fake(pid=100 + len(self.started))
        self.started.append(fake)
        return fake
