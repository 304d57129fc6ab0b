"""Restarting what died: one policy for the gRPC workers and the Envoy child.

A child is *serving* once it says so (a worker writes its ready line, Envoy's listener and
admin endpoint answer). The rules, the same for `loyalty up`, `loyalty serve` and
`loyalty gateway run`:

- At start-up, a child that cannot get to serving at all (bad configuration, port taken,
  database schema too old, ...) ends the command with its one-line reason: nothing would
  serve, and a restart would fail the same way.
- A child that served and then died is always restarted, however often and however far
  apart the deaths are: a service runs for months.
- A child that runs but stopped answering (a worker frozen: runtime/process/liveness.py)
  is "not answering (N missed checks)" from its first missed check (`Child.note_unanswered`:
  a WARNING line, the processes file) and is killed with SIGKILL once it missed enough
  (`Child.kill_unresponsive`); it then counts as one that died.
- The first restart is immediate. When the new child cannot get to serving, or dies again
  less than `Backoff.stable` seconds after it started serving (a crash loop), each next
  attempt waits twice as long: 0.5 s, 1 s, 2 s, ... at most 30 s. A child that served for
  `stable` seconds starts the count again.
- Each death is logged at ERROR with its cause (exit code or signal) and how long the child
  served; each restart is counted (`on_restart`, the metric
  `loyalty_process_restarts_total{process}`) and each change reported (`on_change`, the
  processes file `loyalty status` reads: runtime/process/process_file.py).

Nothing here blocks: the supervisor's loop calls `Child.tick()` every half second, so a
slow or waiting restart of one child never delays another's.
"""

from __future__ import annotations

import enum
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)

# How often the supervising process looks at its children.
SUPERVISE_SECONDS = 0.5


def supervise(stop: threading.Event, checks: list[Callable[[], None]]) -> None:
    """Until `stop` (SIGINT/SIGTERM), run each check (e.g. `Child.tick`) every half second."""
    while not stop.wait(SUPERVISE_SECONDS):
        for check in checks:
            check()


class StartFailed(Exception):  # noqa: N818 (a reason, not a bug)
    """A child could not get to serving; the message is the one-line reason."""


class CannotStartError(RuntimeError):
    """A child could not get to serving at start-up: the command ends."""


class Handle(Protocol):
    """One started child process."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None:
        """None while it runs, else its exit code (negative: killed by that signal)."""

    def ready(self) -> bool:
        """Whether it serves now (without waiting); StartFailed when it never will."""

    def kill(self) -> None:
        """Stop it at once (SIGKILL) and reap it (it failed to start or stopped answering)."""


@dataclass(frozen=True)
class Backoff:
    first: float = 0.5
    cap: float = 30.0
    # A child that served this long was not crash-looping: its next death restarts at once.
    stable: float = 1.0

    def delay(self, failures: int) -> float:
        """Seconds to wait before the next attempt after `failures` failures in a row."""
        if failures <= 0:
            return 0.0
        return min(self.cap, self.first * 2.0 ** (failures - 1))


class State(enum.StrEnum):
    STARTING = "starting"
    SERVING = "serving"
    WAITING = "waiting"  # dead, restart scheduled
    STOPPED = "stopped"


def describe_exit(code: int) -> str:
    """`exited with code 1`, `killed by SIGKILL`."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


@dataclass(frozen=True)
class Exit:
    """How a child last died (or failed to start)."""

    cause: str
    wall_time: float  # time.time()


class Child:
    """One supervised child slot ("worker 1", "envoy"): the process that fills it now and
    the restart policy of the module doc."""

    def __init__(
        self,
        name: str,
        kind: str,
        spawn: Callable[[], Handle],
        *,
        start_timeout: float,
        backoff: Backoff | None = None,
        on_restart: Callable[[str], None] | None = None,
        on_change: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.kind = kind
        self._spawn = spawn
        self._start_timeout = start_timeout
        self._backoff = backoff or Backoff()
        self._on_restart = on_restart
        self._on_change = on_change
        self._clock = clock
        self.state = State.STOPPED
        self.handle: Handle | None = None
        self.restarts = 0
        # Health checks the serving process missed in a row (0: it answers; the worker's
        # liveness pings, runtime/process/liveness.py): shown as "not answering" until it
        # answers again or is killed (`note_unanswered`).
        self.unanswered = 0
        self.last_exit: Exit | None = None
        self._served = False  # at least once, in this slot
        self._failures = 0
        self._since = 0.0  # started (STARTING) or serving since (SERVING)
        self._next_at = 0.0

    @property
    def pid(self) -> int | None:
        return self.handle.pid if self.handle is not None else None

    @property
    def serving(self) -> bool:
        return self.state is State.SERVING

    def start(self) -> None:
        """Start the first process (see `tick` for the rest)."""
        self._launch(self._clock())

    def adopt(self, handle: Handle) -> None:
        """Supervise a process already started and serving."""
        self.handle = handle
        self._served = True
        self._set(State.SERVING, self._clock())

    def tick(self) -> None:
        """Look once: a death schedules a restart, a due restart starts, a start that got
        to serving is noted. CannotStartError when a child never served and cannot start."""
        now = self._clock()
        # In this order, so that a death restarted at once is relaunched in this same look.
        if self.state is State.SERVING:
            self._check_alive(now)
        if self.state is State.WAITING and now >= self._next_at:
            self.restarts += 1
            if self._on_restart is not None:
                self._on_restart(self.kind)
            self._launch(now)
        if self.state is State.STARTING:
            self._check_started(now)

    def note_unanswered(self, missed: int) -> None:
        """The serving process has missed `missed` health checks in a row: between its
        first miss and its SIGKILL it is "not answering", in the log and the processes
        file; it is serving again when it answers."""
        if missed == self.unanswered or self.state is not State.SERVING:
            return
        assert self.handle is not None
        if missed > self.unanswered:
            log.warning(
                "%s (pid %d) not answering: %d missed health check%s in a row",
                self.name,
                self.handle.pid,
                missed,
                "" if missed == 1 else "s",
            )
        elif missed == 0:
            log.warning(
                "%s (pid %d) answers again after %d missed health checks",
                self.name,
                self.handle.pid,
                self.unanswered,
            )
        self.unanswered = missed
        if self._on_change is not None:
            self._on_change()

    def kill_unresponsive(self, reason: str) -> None:
        """The serving process runs but does not answer (`reason`): kill it (SIGKILL) and
        restart it by the same rules as one that died."""
        if self.state is not State.SERVING:
            return
        assert self.handle is not None
        now = self._clock()
        self.handle.kill()
        self._died(now, f"{reason}; killed by SIGKILL")

    def forget(self) -> None:
        """The process was stopped on purpose: no restart."""
        self.handle = None
        self._set(State.STOPPED, self._clock())

    def _launch(self, now: float) -> None:
        try:
            self.handle = self._spawn()
        except (OSError, StartFailed) as exc:
            self._failed_start(now, str(exc))
            return
        self._set(State.STARTING, now)

    def _check_alive(self, now: float) -> None:
        assert self.handle is not None
        code = self.handle.poll()
        if code is None:
            return
        self._died(now, describe_exit(code))

    def _died(self, now: float, how: str) -> None:
        assert self.handle is not None
        served = now - self._since
        self._failures = 0 if served >= self._backoff.stable else self._failures + 1
        self._schedule(
            now, f"{self.name} (pid {self.handle.pid}) {how} after serving {_duration(served)}"
        )

    def _check_started(self, now: float) -> None:
        assert self.handle is not None
        try:
            if now - self._since > self._start_timeout:
                raise StartFailed(f"not serving after {self._start_timeout:.0f} s")
            if not self.handle.ready():
                return
        except StartFailed as exc:
            self.handle.kill()
            self._failed_start(now, str(exc))
            return
        if self.restarts:
            log.warning(
                "%s restarted (pid %d, restart %d)", self.name, self.handle.pid, self.restarts
            )
        self._served = True
        self._set(State.SERVING, now)

    def _failed_start(self, now: float, reason: str) -> None:
        if not self._served:
            raise CannotStartError(f"{self.name} could not start: {reason}")
        self._failures += 1
        self._schedule(now, f"{self.name} could not start: {reason}")

    def _schedule(self, now: float, cause: str) -> None:
        self.last_exit = Exit(cause, time.time())
        delay = self._backoff.delay(self._failures)
        self._next_at = now + delay
        log.error(
            "%s; restarting %s",
            cause,
            "now" if not delay else f"in {_duration(delay)} ({self._failures} failures in a row)",
        )
        self._set(State.WAITING, now)

    def _set(self, state: State, now: float) -> None:
        self.state = state
        self._since = now
        self.unanswered = 0  # a new process, or none
        if self._on_change is not None:
            self._on_change()


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds:.0f} s"
    return f"{seconds / 3600:.1f} h"


__all__ = [
    "SUPERVISE_SECONDS",
    "Backoff",
    "CannotStartError",
    "Child",
    "Exit",
    "Handle",
    "StartFailed",
    "State",
    "describe_exit",
    "supervise",
]
