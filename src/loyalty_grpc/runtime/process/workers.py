"""N gRPC worker processes sharing one port (SO_REUSEPORT), supervised by the parent.

- `start()`: the parent first binds the port itself *without* SO_REUSEPORT and closes it,
  so a port used by anyone else fails loudly (as a single server does) instead of being
  shared; port 0 picks a free port once, for all workers. With `share_port` (`serve
  --share-port`, an upgrade) it skips that check and its workers join the SO_REUSEPORT
  group of the `serve` already there (same user: the kernel shares a port only between
  sockets of one user); new connections then go to both, and when the old one stops
  (rolling stop) its clients move to the new one. Then it starts the workers
  (`python -m loyalty_grpc.runtime.process.worker`, fresh interpreters: nothing is forked, so
  grpc never sees a fork) and waits until each says it is serving.
- `check()`: a worker that died is replaced, by the rules of runtime/process/supervision.py (one
  slot per worker, `supervision.Child`): never given up on once it served, immediately,
  with back-off only when it crash-loops. A serving worker that stops answering the
  parent's pings over its own socket pair (runtime/process/liveness.py: frozen, e.g.
  SIGSTOP) is killed with SIGKILL and replaced the same way. Only a worker that cannot
  get to serving at start-up ends the pool (`WorkerError` with the worker's one-line reason).
- `stop()`: rolling: every worker but the last gets SIGTERM at once and hands its clients
  over to the last (health NOT_SERVING, leaves the port, its connections move, then its
  in-flight calls finish: api/server.py's module doc says why this fails no call); when they
  have exited, the last one stops the same way. The port answers until the last one stops,
  and the stop takes about two hand-overs whatever the number of workers.

The kernel spreads new *connections* over the listening workers; an HTTP/2 client keeps
its connection to one worker. Envoy therefore has to cap the streams per upstream connection
(`max_concurrent_streams` in gateway/envoy.yaml's cluster) so that it opens several, and the
workers age connections (`connection_age_seconds`): clients reconnect about every second,
which spreads connections again, also onto a worker that was restarted.
A worker-side cap (SETTINGS_MAX_CONCURRENT_STREAMS) was tried and rejected: Envoy sends
streams before it reads the server's SETTINGS, and the refused ones became 503s.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from loyalty_grpc.api.server import ServerSettings
from loyalty_grpc.runtime.process.liveness import Heartbeat, LivenessSettings
from loyalty_grpc.runtime.process.supervision import (
    Backoff,
    CannotStartError,
    Child,
    StartFailed,
    describe_exit,
)

log = logging.getLogger(__name__)

START_TIMEOUT = 60.0


class WorkerError(RuntimeError):
    """A worker could not get to serving at start-up."""


def claim_port(host: str, port: int) -> int:
    """Bind (host, port) without SO_REUSEPORT and release it: OSError when anyone else
    holds it. Returns the port (a free one for 0)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            return int(sock.getsockname()[1])
    except OSError as exc:
        raise OSError(
            f"cannot listen on {host}:{port}: is the port in use? ({exc.strerror})"
        ) from None


class _Worker:
    """One worker process, as `supervision.Child` sees it."""

    def __init__(
        self,
        index: int,
        process: subprocess.Popen[str],
        ready_fd: int,
        heartbeat: Heartbeat,
    ) -> None:
        self.index = index
        self.process = process
        self.heartbeat = heartbeat
        self._ready_fd = ready_fd
        self._received = b""
        self.reaped = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        return self.process.poll()

    def ready(self) -> bool:
        """Whether it wrote `ready PID PORT` (without waiting); StartFailed with its
        reason (`failed <why>`, written by the worker) when it exited first."""
        if self._ready_fd < 0:
            return True
        while select.select([self._ready_fd], [], [], 0)[0]:
            chunk = os.read(self._ready_fd, 1024)
            if not chunk:
                self._close_ready()
                code = self.process.wait(10)
                why = self._received.decode(errors="replace").strip().removeprefix("failed ")
                raise StartFailed(
                    why or f"{describe_exit(code)} before it was serving (its log is above)"
                )
            self._received += chunk
            if self._received.startswith(b"ready ") and self._received.endswith(b"\n"):
                self._close_ready()
                return True
        return False

    def kill(self) -> None:
        self.process.kill()
        self.wait_stopped(10)

    def _close_ready(self) -> None:
        if self._ready_fd >= 0:
            os.close(self._ready_fd)
            self._ready_fd = -1

    def ask_to_stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait_stopped(self, timeout: float) -> int:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            log.error(
                "worker %d (pid %d) did not stop in %.0f s; killing it",
                self.index,
                self.process.pid,
                timeout,
            )
            self.process.kill()
            self.process.wait(10)
        self._close_ready()
        self.heartbeat.close()
        if self.process.stdin is not None:
            self.process.stdin.close()
        return self.process.returncode


@dataclass
class WorkerPool:
    settings: ServerSettings
    count: int
    log_level: str = "INFO"
    log_format: str = "text"
    # Called with the pid of every worker that exited (metrics clean-up).
    on_exit: Callable[[int], None] | None = None
    # Called with "worker" at every restart (the restarts metric).
    on_restart: Callable[[str], None] | None = None
    # Called at every change of a worker's state (the processes file).
    on_change: Callable[[], None] | None = None
    backoff: Backoff = field(default_factory=Backoff)
    start_timeout: float = START_TIMEOUT
    # Join the SO_REUSEPORT group of another `serve` already on the port (an upgrade:
    # the new version starts beside the old one) instead of insisting on a free port.
    share_port: bool = False
    # The parent's pings that tell a frozen worker (runtime/process/liveness.py).
    liveness: LivenessSettings = field(default_factory=LivenessSettings)
    children: list[Child] = field(default_factory=list)
    _port: int = 0

    @property
    def port(self) -> int:
        return self._port

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self._running()]

    @property
    def restarts(self) -> int:
        return sum(child.restarts for child in self.children)

    def start(self) -> None:
        """Start every worker and wait until each serves; WorkerError (the command ends)
        when one cannot get to serving."""
        if self.share_port:
            self._port = self.settings.port  # the workers bind it with SO_REUSEPORT
        else:
            self._port = claim_port(self.settings.host, self.settings.port)
        self.settings = replace(self.settings, port=self._port, reuse_port=True)
        self.children = [
            Child(
                f"worker {i}",
                "worker",
                functools.partial(self._launch, i),
                start_timeout=self.start_timeout,
                backoff=self.backoff,
                on_restart=self.on_restart,
                on_change=self.on_change,
            )
            for i in range(self.count)
        ]
        try:
            for child in self.children:
                child.start()
            while not all(child.serving for child in self.children):
                time.sleep(0.05)
                for child in self.children:
                    child.tick()
        except CannotStartError as exc:
            self.stop()
            raise WorkerError(str(exc)) from None
        except BaseException:
            self.stop()
            raise
        log.info(
            "%d gRPC workers serving on %s:%d (pids %s)",
            self.count,
            self.settings.host,
            self._port,
            ", ".join(map(str, self.pids)),
        )

    def _launch(self, index: int) -> _Worker:
        read_fd, write_fd = os.pipe()
        ours, theirs = socket.socketpair()
        try:
            process = subprocess.Popen(  # noqa: S603 (our own module, no shell)
                [
                    sys.executable,
                    "-m",
                    "loyalty_grpc.runtime.process.worker",
                    "--index",
                    str(index),
                    "--ready-fd",
                    str(write_fd),
                    "--health-fd",
                    str(theirs.fileno()),
                ],
                stdin=subprocess.PIPE,
                text=True,
                pass_fds=(write_fd, theirs.fileno()),
                # Its own process group: a terminal's Ctrl-C reaches the parent only, which
                # then stops the workers one by one.
                process_group=0,
            )
        except BaseException:
            os.close(read_fd)
            ours.close()
            raise
        finally:
            os.close(write_fd)
            theirs.close()
        worker = _Worker(index, process, read_fd, Heartbeat(ours, self.liveness))
        assert process.stdin is not None
        config = {
            "server": asdict(self.settings),
            "log_level": self.log_level,
            "log_format": self.log_format,
        }
        try:
            process.stdin.write(json.dumps(config) + "\n")
            process.stdin.flush()  # and left open: its EOF tells the worker we are gone
        except BrokenPipeError:
            pass  # it died already: ready() says so
        return worker

    def check(self) -> None:
        """Restart workers that died (runtime/process/supervision.py: never gives up on a worker
        that served); kill and restart those that stopped answering (liveness.py)."""
        # A worker that died is replaced within the same tick (the slot's handle then
        # names the new process): reap from the handles seen before the ticks as well,
        # or the dead one's live gauges would keep counting (issue 24: pool size 48 with
        # 2 workers of 16 after a SIGKILL).
        before = self._workers()
        for child in self.children:
            child.tick()
        now = time.monotonic()
        for child in self.children:
            worker = child.handle
            if child.serving and isinstance(worker, _Worker):
                reason = worker.heartbeat.check(now)
                if reason is not None:
                    child.kill_unresponsive(reason)
                    self._reaped(worker)
                else:
                    child.note_unanswered(worker.heartbeat.missed)
        for worker in [*before, *self._workers()]:
            if worker.poll() is not None:
                self._reaped(worker)

    def _workers(self) -> list[_Worker]:
        return [child.handle for child in self.children if isinstance(child.handle, _Worker)]

    def _running(self) -> list[_Worker]:
        return [worker for worker in self._workers() if worker.poll() is None]

    def stop(self) -> None:
        """Rolling stop: all workers but the last hand over to it at once, then the last
        one stops; each finishes its calls (see the module doc)."""
        settings = self.settings
        timeout = (
            settings.drain_seconds
            + settings.connection_age_seconds * 1.1
            + settings.grace_seconds
            + 15
        )
        workers = self._workers()
        for child in self.children:
            child.forget()
        for batch in (workers[:-1], workers[-1:]):
            for worker in batch:
                worker.ask_to_stop()
            for worker in batch:
                code = worker.wait_stopped(timeout)
                workers.remove(worker)
                self._reaped(worker)
                log.info(
                    "worker %d (pid %d) stopped (%s); %d still serving",
                    worker.index,
                    worker.pid,
                    code,
                    len(workers),
                )

    def _reaped(self, worker: _Worker) -> None:
        """Once per worker that exited: its pipe closed, its live gauges forgotten."""
        if worker.reaped:
            return
        worker.reaped = True
        worker.heartbeat.close()
        if worker.process.stdin is not None:
            worker.process.stdin.close()
        if self.on_exit is not None:
            self.on_exit(worker.pid)
