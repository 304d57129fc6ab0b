"""N gRPC worker processes sharing one port (SO_REUSEPORT), supervised by the parent.

- `start()`: the parent first binds the port itself *without* SO_REUSEPORT and closes it,
  so a port used by anyone else fails loudly (as a single server does) instead of being
  shared; port 0 picks a free port once, for all workers. Then it starts the workers
  (`python -m loyalty_grpc.runtime.worker`, fresh interpreters: nothing is forked, so
  grpc never sees a fork) and waits until each says it is serving.
- `check()`: a worker that died is replaced, at most `max_restarts` times in all; then
  `WorkerError`.
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

log = logging.getLogger(__name__)

START_TIMEOUT = 60.0
MAX_RESTARTS = 5


class WorkerError(RuntimeError):
    """A worker could not start, or kept dying."""


def claim_port(host: str, port: int) -> int:
    """Bind (host, port) without SO_REUSEPORT and release it: OSError when anyone else
    holds it. Returns the port (a free one for 0)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            return int(sock.getsockname()[1])
    except OSError as exc:
        raise OSError(f"cannot listen on {host}:{port}: is the port in use? ({exc.strerror})"
                      ) from None


@dataclass
class _Worker:
    index: int
    process: subprocess.Popen[str]
    ready_fd: int
    pid: int = 0

    def wait_ready(self, deadline: float) -> None:
        """Until the worker writes `ready PID PORT`; WorkerError if it exits or is late."""
        received = b""
        try:
            while not received.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WorkerError(f"worker {self.index} did not start in time")
                readable, _, _ = select.select([self.ready_fd], [], [], min(left, 0.5))
                if readable:
                    chunk = os.read(self.ready_fd, 256)
                    if not chunk:
                        code = self.process.wait(10)
                        raise WorkerError(f"worker {self.index} exited with {code} before "
                                          "it was serving (its log is above)")
                    received += chunk
        finally:
            self.close_ready()
        self.pid = int(received.split()[1])

    def close_ready(self) -> None:
        if self.ready_fd >= 0:
            os.close(self.ready_fd)
            self.ready_fd = -1

    def ask_to_stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait_stopped(self, timeout: float) -> int:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            log.error("worker %d (pid %d) did not stop in %.0f s; killing it", self.index,
                      self.process.pid, timeout)
            self.process.kill()
            self.process.wait(10)
        self.close_ready()
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
    max_restarts: int = MAX_RESTARTS
    start_timeout: float = START_TIMEOUT
    restarts: int = 0
    _workers: list[_Worker] = field(default_factory=list)
    _port: int = 0

    @property
    def port(self) -> int:
        return self._port

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    def start(self) -> None:
        self._port = claim_port(self.settings.host, self.settings.port)
        self.settings = replace(self.settings, port=self._port, reuse_port=True)
        try:
            starting = [self._launch(i) for i in range(self.count)]
            deadline = time.monotonic() + self.start_timeout
            for worker in starting:
                worker.wait_ready(deadline)
        except BaseException:
            self.stop()
            raise
        log.info("%d gRPC workers serving on %s:%d (pids %s)", self.count, self.settings.host,
                 self._port, ", ".join(map(str, self.pids)))

    def _launch(self, index: int) -> _Worker:
        read_fd, write_fd = os.pipe()
        try:
            process = subprocess.Popen(  # noqa: S603 (our own module, no shell)
                [sys.executable, "-m", "loyalty_grpc.runtime.worker", "--index", str(index),
                 "--ready-fd", str(write_fd)],
                stdin=subprocess.PIPE, text=True, pass_fds=(write_fd,),
                # Its own process group: a terminal's Ctrl-C reaches the parent only, which
                # then stops the workers one by one.
                process_group=0)
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        worker = _Worker(index, process, read_fd)
        self._workers.append(worker)
        assert process.stdin is not None
        config = {"server": asdict(self.settings), "log_level": self.log_level,
                  "log_format": self.log_format}
        try:
            process.stdin.write(json.dumps(config) + "\n")
            process.stdin.flush()  # and left open: its EOF tells the worker we are gone
        except BrokenPipeError:
            pass  # it died already: wait_ready says so
        return worker

    def check(self) -> None:
        """Replace workers that died (bounded); WorkerError when the budget is spent."""
        for worker in list(self._workers):
            code = worker.process.poll()
            if code is None:
                continue
            self._workers.remove(worker)
            if worker.process.stdin is not None:
                worker.process.stdin.close()
            self._exited(worker)
            if self.restarts >= self.max_restarts:
                raise WorkerError(f"gRPC workers keep exiting (worker {worker.index}, pid "
                                  f"{worker.process.pid}, exit code {code}; "
                                  f"{self.restarts} restarts already)")
            self.restarts += 1
            log.error("worker %d (pid %d) exited with %s; restarting (%d/%d)", worker.index,
                      worker.process.pid, code, self.restarts, self.max_restarts)
            replacement = self._launch(worker.index)
            replacement.wait_ready(time.monotonic() + self.start_timeout)

    def stop(self) -> None:
        """Rolling stop: all workers but the last hand over to it at once, then the last
        one stops; each finishes its calls (see the module doc)."""
        settings = self.settings
        timeout = (settings.drain_seconds + settings.connection_age_seconds * 1.1
                   + settings.grace_seconds + 15)
        for batch in (self._workers[:-1], self._workers[-1:]):
            for worker in batch:
                worker.ask_to_stop()
            for worker in batch:
                code = worker.wait_stopped(timeout)
                self._workers.remove(worker)
                self._exited(worker)
                log.info("worker %d (pid %d) stopped (%s); %d still serving", worker.index,
                         worker.process.pid, code, len(self._workers))

    def _exited(self, worker: _Worker) -> None:
        if self.on_exit is not None:
            self.on_exit(worker.process.pid)
