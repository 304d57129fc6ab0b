"""One gRPC worker process: `python -m loyalty_grpc.runtime.process.worker --index N
--ready-fd FD --health-fd FD`, started by `workers.WorkerPool` (never by hand).

It reads its configuration as one JSON line on stdin (secrets stay out of `ps`), serves on
the shared port (SO_REUSEPORT), writes `ready PID PORT` to the ready pipe (or
`failed REASON`, one line, when it cannot serve), answers the parent's pings on the health
socket from then on (runtime/process/liveness.py), and stops
gracefully (health NOT_SERVING, drain, hands its clients over to the other workers, its
in-flight calls finish: api/server.py) on SIGTERM or when its stdin closes (the parent is
gone). It runs in its own process group, so a Ctrl-C at the terminal reaches only the
parent, which then stops the workers in turn (workers.WorkerPool.stop).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import IO

from loyalty_grpc.api.server import ServerSettings, build_server
from loyalty_grpc.runtime.logs import configure_logging
from loyalty_grpc.runtime.process.liveness import start_answering
from loyalty_grpc.runtime.process.shared_port import hand_over

log = logging.getLogger("loyalty_grpc.runtime.process.worker")  # not __main__ under -m


def _stop_on_eof(stream: IO[str], stop: threading.Event) -> None:
    stream.read()  # returns at EOF: the parent closed the pipe or died
    stop.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loyalty-worker")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--ready-fd", type=int, required=True)
    parser.add_argument("--health-fd", type=int, required=True)
    args = parser.parse_args(argv)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    config = json.loads(sys.stdin.readline())
    configure_logging(config["log_level"], config["log_format"])
    threading.Thread(
        target=_stop_on_eof, args=(sys.stdin, stop), daemon=True, name="parent-watch"
    ).start()
    settings = ServerSettings(**config["server"])
    try:
        server = build_server(
            settings,
            hand_over=functools.partial(
                hand_over, connection_age_seconds=settings.connection_age_seconds
            ),
        )
        server.start()
    except Exception as exc:
        # The parent reports this one line; the traceback goes to the log.
        log.exception("worker %d could not start", args.index)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        os.write(args.ready_fd, f"failed {reason}\n".encode())
        return 1
    # Everything built so far (modules, tables, the server) lives as long as the process:
    # out of the garbage collector's sight, a full collection stays short (tail latency).
    gc.freeze()
    os.write(args.ready_fd, f"ready {os.getpid()} {server.port}\n".encode())
    os.close(args.ready_fd)
    start_answering(args.health_fd)
    log.info("worker %d (pid %d) serving on port %d", args.index, os.getpid(), server.port)
    stop.wait()
    log.info("worker %d (pid %d) stopping", args.index, os.getpid())
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
