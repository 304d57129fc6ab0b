"""The restart policy (runtime/process/supervision.py) on a simulated clock and simulated processes:
never gives up on a child that served, restarts at once, backs off only on a crash loop,
gives up only when a child cannot get to serving at start-up."""

from __future__ import annotations

import signal

import pytest

from loyalty_grpc.runtime.process.supervision import (
    Backoff,
    CannotStartError,
    Child,
    State,
    describe_exit,
)
from tests.simulated_processes import Clock, Fake, Spawner


def _state(child: Child) -> State:
    """Read afresh (a tick changes it: no narrowing from an earlier assert)."""
    return child.state


def _child(spawner: Spawner, clock: Clock, **kwargs: object) -> tuple[Child, list[str]]:
    restarts: list[str] = []
    child = Child(
        "worker 0",
        "worker",
        spawner,
        start_timeout=60.0,
        clock=clock,
        on_restart=restarts.append,
        **kwargs,  # type: ignore[arg-type]
    )
    return child, restarts


def _serving(spawner: Spawner, clock: Clock) -> tuple[Child, list[str]]:
    child, restarts = _child(spawner, clock)
    child.start()
    child.tick()
    child.tick()
    assert _state(child) is State.SERVING
    return child, restarts


def _die(child: Child, clock: Clock, after: float, code: int = -signal.SIGKILL) -> None:
    clock.now += after
    assert child.handle is not None
    child.handle.code = code  # type: ignore[attr-defined]
    child.tick()


def test_a_child_that_served_is_restarted_at_once_every_time():
    clock, spawner = Clock(), Spawner()
    child, restarts = _serving(spawner, clock)
    for n in range(1, 51):  # far more than any fixed budget
        _die(child, clock, after=2.0)
        assert _state(child) is State.STARTING, "restarted in the same look, no delay"
        child.tick()
        assert _state(child) is State.SERVING
        assert child.restarts == n
    assert restarts == ["worker"] * 50
    assert len(spawner.started) == 51
    assert child.last_exit is not None
    assert "killed by SIGKILL after serving 2.0 s" in child.last_exit.cause


def test_a_crash_loop_backs_off_doubling_up_to_the_cap():
    clock, spawner = Clock(), Spawner()
    child, _ = _serving(spawner, clock)
    waits: list[float] = []
    for _ in range(10):
        _die(child, clock, after=0.1, code=1)  # served 0.1 s: a crash loop
        assert _state(child) is State.WAITING
        waited = 0.0
        while _state(child) is State.WAITING:
            clock.now += 0.25
            waited += 0.25
            child.tick()
        waits.append(waited)
        child.tick()
        assert _state(child) is State.SERVING
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]
    # Serving long enough starts the count again: the next death restarts at once.
    _die(child, clock, after=5.0)
    assert _state(child) is State.STARTING


def test_backoff_delays():
    backoff = Backoff()
    assert [backoff.delay(n) for n in range(9)] == [0, 0.5, 1, 2, 4, 8, 16, 30, 30]


def test_a_child_that_cannot_start_at_start_up_ends_the_command():
    clock = Clock()
    spawner = Spawner([Fake(pid=1, fails="cannot listen on 0.0.0.0:50051")])
    child, _ = _child(spawner, clock)
    child.start()
    with pytest.raises(CannotStartError, match="worker 0 could not start: cannot listen on"):
        child.tick()
    assert spawner.started[0].killed


def test_a_child_too_slow_at_start_up_ends_the_command():
    clock, spawner = Clock(), Spawner([Fake(pid=1, ready_after=10**9)])  # never
    child, _ = _child(spawner, clock)
    child.start()
    child.tick()
    clock.now += 61
    with pytest.raises(CannotStartError, match="not serving after 60 s"):
        child.tick()


def test_a_restart_that_cannot_start_is_tried_again_forever_with_back_off():
    clock = Clock()
    spawner = Spawner([Fake(pid=1)] + [Fake(pid=2 + n, fails="port taken") for n in range(12)])
    child, restarts = _serving(spawner, clock)
    _die(child, clock, after=100.0)  # the first attempt comes at once, in this look
    waits: list[float] = []
    while len(spawner.started) < 14:
        failed = len(spawner.started)
        assert _state(child) is State.WAITING  # failed again: never CannotStartError
        assert child.last_exit is not None
        assert child.last_exit.cause == "worker 0 could not start: port taken"
        waited = 0.0
        while len(spawner.started) == failed:
            clock.now += 0.25
            waited += 0.25
            child.tick()
        waits.append(waited)
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0]
    child.tick()
    assert _state(child) is State.SERVING  # the next one (a good one) serves
    assert len(restarts) == 13


def test_a_spawn_error_after_serving_is_retried():
    clock = Clock()
    calls = {"n": 0}

    def spawn() -> Fake:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("no memory")
        return Fake(pid=calls["n"])

    child = Child("envoy", "envoy", spawn, start_timeout=30, clock=clock)
    child.start()
    child.tick()
    child.tick()
    _die(child, clock, after=10.0)
    assert _state(child) is State.WAITING
    clock.now += 0.5
    child.tick()
    child.tick()
    assert _state(child) is State.SERVING


def test_every_change_is_reported_and_a_forgotten_child_stays_stopped():
    clock, spawner = Clock(), Spawner()
    changes: list[State] = []
    child = Child(
        "envoy",
        "envoy",
        spawner,
        start_timeout=30,
        clock=clock,
        on_change=lambda: changes.append(child.state),
    )
    child.start()
    child.tick()
    child.tick()
    _die(child, clock, after=3.0)
    child.tick()
    child.forget()
    child.tick()
    assert changes == [
        State.STARTING,
        State.SERVING,
        State.WAITING,
        State.STARTING,
        State.SERVING,
        State.STOPPED,
    ]
    assert len(spawner.started) == 2


def test_exit_descriptions():
    assert describe_exit(1) == "exited with code 1"
    assert describe_exit(0) == "exited with code 0"
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(-200) == "killed by signal 200"


def test_a_child_that_stopped_answering_is_killed_and_restarted_at_once():
    clock, spawner = Clock(), Spawner()
    child, restarts = _serving(spawner, clock)
    frozen = child.handle
    assert isinstance(frozen, Fake)
    clock.now += 30.0
    child.kill_unresponsive("did not answer 3 health checks in a row")
    assert frozen.killed
    assert _state(child) is State.WAITING
    assert child.last_exit is not None
    assert child.last_exit.cause == (
        f"worker 0 (pid {frozen.pid}) did not answer 3 health checks in a row; "
        "killed by SIGKILL after serving 30 s"
    )
    child.tick()
    assert restarts == ["worker"]
    assert child.handle is not frozen
    child.tick()
    assert _state(child) is State.SERVING


def test_only_a_serving_child_is_killed_for_not_answering():
    clock, spawner = Clock(), Spawner()
    child, _ = _child(spawner, clock)
    child.start()
    child.kill_unresponsive("did not answer")
    assert _state(child) is State.STARTING
    assert isinstance(child.handle, Fake)
    assert not child.handle.killed


def test_a_child_not_answering_is_shown_so_until_it_answers_or_is_killed(
    caplog: pytest.LogCaptureFixture,
):
    """Between the first missed check and the SIGKILL the child is "not answering": each
    new miss is logged and reported (the processes file); an answer, or the restart that
    follows a kill, clears it."""
    clock, spawner = Clock(), Spawner()
    changes: list[int] = []
    slot: list[Child] = []
    child, _ = _child(spawner, clock, on_change=lambda: changes.append(slot[0].unanswered))
    slot.append(child)
    child.start()
    child.tick()
    child.tick()
    pid = child.pid
    changes.clear()
    with caplog.at_level("WARNING"):
        child.note_unanswered(0)  # answering: nothing to say
        child.note_unanswered(1)
        child.note_unanswered(1)  # no news
        child.note_unanswered(2)
        child.note_unanswered(0)
    assert changes == [1, 2, 0]
    assert [record.getMessage() for record in caplog.records] == [
        f"worker 0 (pid {pid}) not answering: 1 missed health check in a row",
        f"worker 0 (pid {pid}) not answering: 2 missed health checks in a row",
        f"worker 0 (pid {pid}) answers again after 2 missed health checks",
    ]
    child.note_unanswered(2)
    clock.now += 30.0
    child.kill_unresponsive("did not answer 3 health checks in a row")
    assert child.unanswered == 0  # the slot waits for its restart: not a frozen process
    child.tick()
    child.tick()
    assert _state(child) is State.SERVING
    assert child.unanswered == 0
