"""Issue 11 §1: the supervisor never gives up on a child that served. A worker SIGKILLed 10
times and Envoy 10 times, 2 s apart, under a light load of sales and redemptions: the stack
answers after every kill, `loyalty status` and /metrics count the restarts, and the audit
is exact."""

from __future__ import annotations

from tests.reliability.harness import Journal, Load, Stack, audit, kill_in_turn

KILLS = 10  # of each kind


def test_restarts(stack: Stack, journal: Journal):
    with Load(stack, journal, "restarts", clients=2, pause=0.05) as load:
        answered = kill_in_turn(stack, journal, ["worker", "envoy"] * KILLS)
    assert stack.restarts_logged() == 2 * KILLS
    status = stack.status()
    assert status.returncode == 0, status.stdout + status.stderr
    restarts = next(
        line for line in status.stdout.splitlines() if line.strip().startswith("restarts:")
    )
    assert f"worker {KILLS}, envoy {KILLS};" in restarts, status.stdout
    assert stack.restarts_metric() == {"worker": KILLS, "envoy": KILLS}
    print(
        f"\nrestarts: the stack answered at most {max(answered['worker']):.2f} s after a "
        f"worker kill, {max(answered['envoy']):.2f} s after an Envoy kill; {load.calls} "
        f"calls: {journal.summary()}; {restarts.strip()}; {audit(stack)}"
    )
