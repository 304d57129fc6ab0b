"""Issue 24 §4: a frozen worker is replaced. `loyalty up` with 2 workers and short health
checks (runtime/process/liveness.py); one worker is stopped with SIGSTOP under a light load
of sales and redemptions: the supervisor kills it (SIGKILL) and starts another, every call
still gets its answer (the calls that reached the frozen worker are retried by Envoy once
it is killed, or by the clients), `loyalty status` and /metrics count the restart, the
other worker is left alone, and the audit is exact."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from loyalty_grpc.runtime.process.process_file import summary
from tests.reliability.harness import Journal, Load, Stack, World, audit, running_stack

# Short checks for the test: a frozen worker is killed about 7 s after it froze (three
# pings missed, 2 s each), still far beyond what a healthy worker needs to answer a ping;
# from its first miss to its kill (at least two deadlines, 4 s) it is "not answering".
CHECKS = {
    "LOYALTY_WORKER_CHECK_SECONDS": "1",
    "LOYALTY_WORKER_CHECK_DEADLINE_SECONDS": "2",
    "LOYALTY_WORKER_CHECK_MISSES": "3",
}
# Generous bounds, not measurements.
REPLACED_WITHIN = 60.0
CALLS_AFTER = 20


@pytest.fixture(scope="module")
def stack(
    create_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    with running_stack(
        create_database(), tmp_path_factory.mktemp("frozen"), World.make(), **CHECKS
    ) as up:
        yield up


def _wait(condition: Callable[[], bool], what: str, stack: Stack) -> None:
    start = time.monotonic()
    while not condition():
        assert stack.up.proc.poll() is None, "loyalty up exited:\n" + stack.log_tail()
        assert time.monotonic() - start < REPLACED_WITHIN, (
            f"{what}: not after {REPLACED_WITHIN} s\n" + stack.log_tail()
        )
        time.sleep(0.05)


def test_a_frozen_worker_is_replaced(stack: Stack, journal: Journal):
    workers = stack.workers()
    assert len(workers) == 2
    frozen, other = workers
    with Load(stack, journal, "frozen", clients=2, pause=0.05) as load:
        _wait(lambda: load.calls >= CALLS_AFTER, "calls before the freeze", stack)
        os.kill(frozen.pid, signal.SIGSTOP)
        try:
            # Before it is killed: "not answering", logged and in the processes file that
            # `loyalty status` reads (read as soon as the line is logged: the kill is at
            # least one more deadline, 2 s, away).
            missed = f"(pid {frozen.pid}) not answering: 1 missed health check in a row"
            _wait(lambda: any(missed in line for line in stack.up.lines), missed, stack)
            processes = summary(stack.data_dir)
            assert processes is not None
            assert not processes.ok
            assert re.search(
                r"worker \d not answering \([12] missed checks?\)", processes.processes
            ), processes.processes
            _wait(lambda: stack.restarts_logged() >= 1, "the frozen worker replaced", stack)
            _wait(lambda: not frozen.is_running(), "the frozen worker gone", stack)
        finally:
            if frozen.is_running():  # the test failed: leave nothing stopped behind
                os.kill(frozen.pid, signal.SIGCONT)
        calls = load.calls
        _wait(lambda: load.calls >= calls + CALLS_AFTER, "calls after the restart", stack)
    killed = [line for line in stack.up.lines if f"(pid {frozen.pid}) did not answer" in line]
    assert len(killed) == 1, stack.log_tail()
    assert "did not answer 3 health checks in a row" in killed[0], killed[0]
    # It was "not answering" before, and the log says so first.
    first_miss = next(n for n, line in enumerate(stack.up.lines) if missed in line)
    assert first_miss < stack.up.lines.index(killed[0])
    assert "; killed by SIGKILL after serving" in killed[0], killed[0]
    # The healthy worker was never taken for a frozen one.
    assert other.is_running()
    assert other.pid in {w.pid for w in stack.workers()}
    assert stack.restarts_logged() == 1, stack.log_tail()
    assert len(stack.workers()) == 2

    # Healthy again once Envoy's own health check has seen the new worker answer (it
    # marked the port failed while the frozen worker held calls; under load, a moment
    # after the replacement answers calls).
    statuses: list[subprocess.CompletedProcess[str]] = []

    def healthy() -> bool:
        statuses.append(stack.status())
        return statuses[-1].returncode == 0

    _wait(healthy, "loyalty status healthy again", stack)
    status = statuses[-1]
    restarts = next(
        line for line in status.stdout.splitlines() if line.strip().startswith("restarts:")
    )
    assert "worker 1, envoy 0; last: worker " in restarts, status.stdout
    assert f"(pid {frozen.pid}) did not answer 3 health checks" in restarts, status.stdout
    assert "not answering" not in status.stdout, status.stdout
    metric = stack.restarts_metric()
    assert metric.get("worker") == 1, metric
    assert metric.get("envoy", 0) == 0, metric
    print(f"\nfrozen worker: {load.calls} calls: {journal.summary()}; {audit(stack)}")
