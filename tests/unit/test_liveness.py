"""The parent's pings that tell a frozen worker (runtime/process/liveness.py), over a real
socket pair and a simulated clock: an answering worker is never reported, one that stops
answering is after `misses` missed pings in a row, a late answer does not count."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from loyalty_grpc.runtime.process.liveness import Heartbeat, LivenessSettings, answer
from loyalty_grpc.runtime.process.supervision import SUPERVISE_SECONDS
from tests.gateway_specs import GATEWAY

SETTINGS = LivenessSettings(interval=5.0, deadline=2.0, misses=3)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        yield ours, theirs


def _echo_pending(theirs: socket.socket) -> None:
    """What the worker's thread does, once, for the pings sent so far."""
    theirs.sendall(theirs.recv(256))


def test_an_answering_worker_is_never_reported(pair: tuple[socket.socket, socket.socket]):
    ours, theirs = pair
    heartbeat = Heartbeat(ours, SETTINGS)
    now = 0.0
    for _ in range(20):
        assert heartbeat.check(now) is None  # sends a ping
        _echo_pending(theirs)
        now += 1.0  # answered within the deadline
        assert heartbeat.check(now) is None
        now += SETTINGS.interval
    assert heartbeat.missed == 0


def test_a_silent_worker_is_reported_after_misses_in_a_row(
    pair: tuple[socket.socket, socket.socket],
):
    ours, _ = pair
    heartbeat = Heartbeat(ours, SETTINGS)
    reasons: list[tuple[float, str]] = []
    now = 0.0
    while not reasons and now < 100:
        reason = heartbeat.check(now)
        if reason is not None:
            reasons.append((now, reason))
        now += 0.5
    assert reasons == [
        (
            # pings at 0, 5 and 10 s, each missed once its 2 s deadline passed
            12.5,
            "did not answer 3 health checks in a row (each within 2 s, every 5 s)",
        )
    ]


def test_an_answer_resets_the_count_and_a_late_one_does_not_count(
    pair: tuple[socket.socket, socket.socket],
):
    ours, theirs = pair
    heartbeat = Heartbeat(ours, SETTINGS)
    heartbeat.check(0.0)  # ping 1
    assert heartbeat.check(2.5) is None
    assert heartbeat.missed == 1
    _echo_pending(theirs)  # ping 1 answered late
    heartbeat.check(5.0)  # reads the late answer, sends ping 2
    assert heartbeat.check(7.5) is None
    assert heartbeat.missed == 2  # the late answer was not ping 2's
    heartbeat.check(10.0)  # ping 3
    _echo_pending(theirs)
    assert heartbeat.check(10.5) is None
    assert heartbeat.missed == 0


def test_no_checks_when_disabled(pair: tuple[socket.socket, socket.socket]):
    ours, theirs = pair
    heartbeat = Heartbeat(ours, LivenessSettings(interval=0))
    for now in range(100):
        assert heartbeat.check(float(now)) is None
    theirs.setblocking(False)
    with pytest.raises(BlockingIOError):
        theirs.recv(1)  # not a single ping sent


def test_the_worker_side_echoes_until_the_parent_closes():
    ours, theirs = socket.socketpair()
    thread = threading.Thread(target=answer, args=(theirs,), daemon=True)
    thread.start()
    with ours:
        for byte in (1, 2, 255):
            ours.sendall(bytes([byte]))
            assert ours.recv(1) == bytes([byte])
    thread.join(30)
    assert not thread.is_alive()


def _route_timeouts() -> set[float]:
    config = yaml.safe_load((GATEWAY / "envoy.yaml").read_text(encoding="utf-8"))
    found: set[float] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            route = node.get("route")
            if isinstance(route, dict) and route.get("cluster") == "loyalty_grpc":
                found.add(float(str(route["timeout"]).removesuffix("s")))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config)
    return found


def test_the_defaults_replace_a_frozen_worker_before_envoy_gives_up_on_its_calls():
    """A call stuck on a frozen worker is retried by Envoy when the worker's SIGKILL resets
    its connection; that must come before the route timeout answers it 504 (with a
    supervision loop's look and a restart to spare)."""
    timeouts = _route_timeouts()
    assert timeouts, "no route to the loyalty_grpc cluster found in gateway/envoy.yaml"
    defaults = LivenessSettings()
    assert defaults.worst_case + SUPERVISE_SECONDS + 2 < min(timeouts)


def test_the_defaults_forgive_a_long_pause():
    """A healthy worker is killed only after misses × deadline seconds without an answer:
    several seconds, far beyond a GC pause (milliseconds) or scheduling on a busy host."""
    defaults = LivenessSettings()
    assert defaults.misses * defaults.deadline >= 9


def test_the_operations_page_states_the_defaults():
    """docs/operations.md (Supervision) quotes the defaults and what follows from them."""
    page = (Path(__file__).parents[2] / "docs" / "operations.md").read_text(encoding="utf-8")
    text = " ".join(page.split())
    defaults = LivenessSettings()
    for quoted in (
        f"**The defaults** ({defaults.interval:g} s, {defaults.deadline:g} s, "
        f"{defaults.misses} misses) replace a frozen worker within about "
        f"{defaults.worst_case:.0f} s",
        f"would have to go {defaults.misses * defaults.deadline:g} s without running a thread",
    ):
        assert quoted in text
