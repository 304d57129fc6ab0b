"""Whether a running worker still answers: a ping over its own socket pair, with a deadline.

The parent and each worker share one `socket.socketpair()` (the worker's end is passed as
`--health-fd`). Every `interval` seconds the parent sends one byte (a sequence number);
a thread of the worker (`answer`) sends it straight back. A ping not answered within
`deadline` seconds is a miss; `misses` misses in a row and the worker is frozen (SIGSTOP,
a C call that never returns while it holds the GIL) and the supervisor
replaces it (`supervision.Child.kill_unresponsive`). From its first miss until then (or
until it answers again) it is shown as "not answering (N missed checks)" in the log and
in `loyalty status` (`Heartbeat.missed`, `supervision.Child.note_unanswered`).

Why a socket pair and not a health check on a port: the workers share their gRPC port
(SO_REUSEPORT), so a call to it reaches whichever worker the kernel picks, never a chosen
one; a private port or Unix socket per worker would serve the whole API beside the
shared, possibly TLS, port. The pair addresses exactly one process, needs no file, no
port and no gRPC client in the parent, and costs the calls nothing: one byte each way per
interval, answered by a thread that sleeps in `recv` in between. What it proves is that
the worker's process is scheduled and its interpreter runs threads; a gRPC server wedged
while Python runs is not seen (the health line of `loyalty status` and Envoy's timeouts
are what remains for that).

Nothing here blocks: the parent's side is polled by the supervision loop.
"""

from __future__ import annotations

import select
import socket
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class LivenessSettings:
    """LOYALTY_WORKER_CHECK_SECONDS, _DEADLINE_SECONDS and _MISSES (runtime/settings.py).

    The defaults are generous: a healthy worker is killed only when it does not echo one
    byte within 3 s, three times in a row (9 s without running a thread: a GC pause is
    milliseconds, a busy machine's scheduling delay far less than a second). And they are
    short enough that a frozen worker is killed (`worst_case`, about 11 s) before Envoy's
    route timeout (15 s, gateway/envoy.yaml) answers the calls stuck on it with a 504:
    its SIGKILL resets their connections and Envoy retries them (retry_on `reset`) on
    the other workers. A unit test ties the two."""

    interval: float = 2.0  # 0: no checks
    deadline: float = 3.0
    misses: int = 3

    @property
    def worst_case(self) -> float:
        """The longest a frozen worker can go unnoticed: it froze just after answering a
        ping, the next one is sent `interval` later, and each miss takes `deadline` (the
        next ping leaves when the previous one is missed, the interval having passed),
        seen at the supervision loop's next look."""
        return self.interval + self.misses * max(self.deadline, self.interval)

    @property
    def enabled(self) -> bool:
        return self.interval > 0


class Heartbeat:
    """The parent's side of one worker's socket pair (non-blocking)."""

    def __init__(self, sock: socket.socket, settings: LivenessSettings) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._settings = settings
        self._sequence = 0
        self._sent_at: float | None = None  # the ping awaiting its answer
        self._next_at: float | None = None  # None: not started (the worker serves from now)
        self.missed = 0  # in a row

    def check(self, now: float) -> str | None:
        """Look once (at most one ping in flight); the reason when the worker has missed
        `misses` pings in a row, else None."""
        settings = self._settings
        if not settings.enabled:
            return None
        if self._next_at is None:
            self._next_at = now
        if self._sent_at is not None:
            if self._answered():
                self._sent_at = None
                self.missed = 0
            elif now - self._sent_at > settings.deadline:
                self._sent_at = None
                self.missed += 1
                if self.missed >= settings.misses:
                    return (
                        f"did not answer {self.missed} health checks in a row "
                        f"(each within {settings.deadline:g} s, every {settings.interval:g} s)"
                    )
        if self._sent_at is None and now >= self._next_at:
            self._sequence = (self._sequence + 1) % 256
            try:
                self._sock.send(bytes([self._sequence]))
            except (BlockingIOError, InterruptedError):
                pass  # its buffer is full of unanswered pings: a miss when the deadline passes
            except OSError:
                return None  # the worker is gone: its exit is seen by poll()
            self._sent_at = now
            self._next_at = now + settings.interval
        return None

    def _answered(self) -> bool:
        """Whether the worker echoed the ping in flight (late echoes of earlier ones are
        read and ignored)."""
        answered = False
        while select.select([self._sock], [], [], 0)[0]:
            try:
                data = self._sock.recv(256)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                return False
            if not data:
                return False  # the worker is gone: poll() says how
            answered = answered or self._sequence in data
        return answered

    def close(self) -> None:
        self._sock.close()


def answer(sock: socket.socket) -> None:
    """The worker's side: echo every ping until the parent closes its end."""
    with sock:
        while True:
            try:
                data = sock.recv(256)
            except OSError:
                return
            if not data:
                return
            try:
                sock.sendall(data)
            except OSError:
                return


def start_answering(fd: int) -> threading.Thread:
    """In a worker: answer the parent's pings on the inherited descriptor `fd`."""
    sock = socket.socket(fileno=fd)
    thread = threading.Thread(target=answer, args=(sock,), daemon=True, name="liveness")
    thread.start()
    return thread


__all__ = ["Heartbeat", "LivenessSettings", "answer", "start_answering"]
