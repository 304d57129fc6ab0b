"""WorkerPool.check tells `on_exit` (runtime/metrics.py `mark_worker_dead`: the dead
worker's live gauges stop counting) about every worker that died, also one the
supervisor replaces in the same look that sees it dead (it served past Backoff.stable):
the issue 24 run where loyalty_db_pool_size read 48 with 2 live workers of 16. Simulated
processes and clock: nothing is started, no time passes."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import pytest

from loyalty_grpc.api.server import ServerSettings
from loyalty_grpc.runtime.process.liveness import Heartbeat, LivenessSettings
from loyalty_grpc.runtime.process.supervision import Backoff, Child
from loyalty_grpc.runtime.process.workers import WorkerPool, _Worker
from tests.simulated_processes import Clock

# The parent's ends of the simulated workers' socket pairs, closed after each test.
_OPEN: list[Heartbeat] = []


@pytest.fixture(autouse=True)
def _close_heartbeats() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


@dataclass
class _Process:
    """What _Worker uses of a subprocess.Popen."""

    pid: int
    returncode: int | None = None
    stdin: None = None

    def poll(self) -> int | None:
        return self.returncode


def _pool(clock: Clock) -> tuple[WorkerPool, list[int], list[_Process]]:
    exited: list[int] = []
    started: list[_Process] = []

    def spawn() -> _Worker:
        process = _Process(pid=100 + len(started))
        started.append(process)
        ours, theirs = socket.socketpair()
        theirs.close()
        # -1: ready at once; the liveness pings off (runtime/process/liveness.py)
        heartbeat = Heartbeat(ours, LivenessSettings(interval=0))
        _OPEN.append(heartbeat)
        return _Worker(0, cast("subprocess.Popen[str]", process), -1, heartbeat)

    pool = WorkerPool(ServerSettings(database_url="unused", admin_token="unused"), 1)
    pool.on_exit = exited.append
    pool.children = [Child("worker 0", "worker", spawn, start_timeout=60, clock=clock)]
    pool.children[0].start()
    pool.check()  # serving
    return pool, exited, started


def test_a_worker_replaced_in_the_same_look_is_reaped() -> None:
    clock = Clock()
    pool, exited, started = _pool(clock)
    clock.now += Backoff().stable + 1  # served long enough: no back-off
    started[0].returncode = -9  # SIGKILL
    pool.check()
    assert len(started) == 2  # replaced in that same look
    assert exited == [started[0].pid]
    pool.check()
    assert exited == [started[0].pid]  # once


def test_a_worker_restarted_after_a_back_off_is_reaped_once() -> None:
    clock = Clock()
    pool, exited, started = _pool(clock)
    started[0].returncode = -9  # died at once: restarted after a back-off
    pool.check()
    assert len(started) == 1
    assert exited == [started[0].pid]
    clock.now += Backoff().first
    pool.check()
    assert len(started) == 2
    assert exited == [started[0].pid]
