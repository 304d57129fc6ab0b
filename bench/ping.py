"""End-to-end throughput and latency of `ping`, for docs/performance.md (a benchmark, not a test).

    .venv/bin/python bench/ping.py [--seconds 10] [--concurrency 16] [--grpc-server-process]
                                   [--load-generator auto|wrk|python]

It starts its own stack in a temporary directory, exactly as tests/e2e/conftest.py does
but with the server's normal settings (16 worker threads, key cache TTL 5 s; the per-key
call limit on, raised to RATE_LIMIT so that it never refuses the one key): a fresh
embedded PostgreSQL, migrations, a fixture with one key, the gRPC server and Envoy in
front of it (`--concurrency 1`, as `loyalty up` runs it). Everything listens on loopback
only. It then measures, each for `--seconds` (default 10, at most 60):

(a) POST /api/v1/ping through Envoy, HTTP/1.1 keep-alive, `--concurrency` connections;
(b) the same Ping over native gRPC straight to the server, `--concurrency` channels;

and prints requests/s, p50/p90/p99 latency and the error count of each, then stops
everything. Every request must succeed (HTTP 200 with `{"ok":true`, gRPC OK with ok=true);
anything else is counted as an error and the first one is shown.

Load generator. The client must not be the bottleneck it measures, and it must not share
the server's GIL. For HTTP, `wrk` is used when it is on PATH (C, epoll; `apt-get install
wrk`); otherwise, and always for gRPC, `--concurrency` worker processes (spawned, not
forked: gRPC does not survive fork) each loop over one keep-alive connection or one gRPC
channel until the deadline and record every latency. The workers are separate processes,
so they never hold the server's GIL; but a Python client costs CPU per request of the same
order as the Python server, so on a machine with few cores the Python generator's numbers
are a lower bound. The table says which generator produced each row. The generator always
runs on the same machine as the server and competes with it (and with Envoy and
PostgreSQL) for the cores; the table prints `os.cpu_count()` for that reason.

Where the server runs. By default it runs inside this process, as in the e2e tests: during
a measurement this process only waits for its load-generator children, so the server has
the GIL to itself and the numbers are the same as with a separate server process (measured:
within run-to-run noise) while start-up is simpler. `--grpc-server-process` instead runs
`python -m loyalty_grpc.runtime.cli serve` as a child process (env LOYALTY_DATABASE_URL and
LOYALTY_ADMIN_TOKEN), i.e. the deployed `loyalty serve` path, to check that claim.

What limits it (measured on 2 cores): the server process sits at ~100 % of one core (the
GIL), Envoy at ~0.5 core and wrk at <0.1 core, so the HTTP row is the Python server's
ceiling. In the gRPC row 16 Python client processes take ~0.9 core away from the server,
which is why direct gRPC can come out *slower* than HTTP through Envoy on a small machine.
wrk's percentiles include failed requests, if there were any (the error column says so).

Bounds: every loop stops at its deadline or after MAX_REQUESTS_PER_WORKER requests; every
request has a 5 s timeout; start-up, shutdown and result collection have timeouts.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import logging
import math
import multiprocessing
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.context import SpawnContext
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from queue import Empty
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

MAX_SECONDS = 60.0
# The per-key limit runs (its cost is part of every call) but never refuses: one key makes
# thousands of calls a second here, far over the default 600 a minute.
RATE_LIMIT = 1_000_000
MAX_CONCURRENCY = 256
REQUEST_TIMEOUT = 5.0
MAX_REQUESTS_PER_WORKER = 5_000_000
WARMUP_REQUESTS = 20
WRK_WARMUP_SECONDS = 1.0
STARTUP_TIMEOUT = 60.0
SERVER_STOP_TIMEOUT = 20.0
PING_PATH = "/api/v1/ping"
OK_PREFIX = b'{"ok":true'

Kind = Literal["http", "grpc"]


# ---------------------------------------------------------------- results


@dataclass
class Result:
    label: str
    generator: str
    requests: int  # successful
    errors: int
    seconds: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    first_error: str = ""

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list (nan when empty)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


# ---------------------------------------------------------------- Python load generator
# Runs in spawned worker processes: keep what it needs importable without the server.


@dataclass(frozen=True)
class WorkerJob:
    kind: Kind
    host: str
    port: int
    key: str
    seconds: float


class _Call(Protocol):
    def __call__(self) -> tuple[bool, str]: ...


def _http_call(job: WorkerJob) -> tuple[_Call, http.client.HTTPConnection]:
    connection = http.client.HTTPConnection(job.host, job.port, timeout=REQUEST_TIMEOUT)
    headers = {"Authorization": f"Bearer {job.key}", "Content-Type": "application/json"}

    def call() -> tuple[bool, str]:
        try:
            connection.request("POST", PING_PATH, body=b"{}", headers=headers)
            response = connection.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException) as exc:
            connection.close()  # the next request reconnects
            return False, f"{type(exc).__name__}: {exc}"
        if response.status != 200 or not body.startswith(OK_PREFIX):
            return False, f"HTTP {response.status}: {body[:200]!r}"
        return True, ""

    return call, connection


def _grpc_call(job: WorkerJob) -> tuple[_Call, object]:
    import grpc

    from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
    from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pb_grpc

    channel = grpc.insecure_channel(f"{job.host}:{job.port}")
    stub = pb_grpc.PosServiceStub(channel)
    metadata = (("authorization", f"Bearer {job.key}"),)
    request = pb.PingRequest()

    def call() -> tuple[bool, str]:
        try:
            response = stub.Ping(request, metadata=metadata, timeout=REQUEST_TIMEOUT)
        except grpc.RpcError as exc:
            return False, f"gRPC {exc.code()}: {exc.details()}"
        if not response.ok:
            return False, f"gRPC OK but ok=false: {response}"
        return True, ""

    return call, channel


@dataclass(frozen=True)
class WorkerReport:
    pid: int
    done: bool  # False: connected and warmed up, waiting for the start signal
    latencies: bytes = b""  # array("d") of seconds, one per successful request
    errors: int = 0
    t_start: float = 0.0
    t_end: float = 0.0
    first_error: str = ""


def worker_main(job: WorkerJob, start: EventType, reports: Queue[WorkerReport]) -> None:
    """One load-generator process: connect, warm up, say ready, wait for `start`, then
    loop until the deadline and report every latency."""
    call, handle = _http_call(job) if job.kind == "http" else _grpc_call(job)
    first_error = ""
    for _ in range(WARMUP_REQUESTS):
        ok, message = call()
        if not ok and not first_error:
            first_error = "warm-up: " + message
    reports.put(WorkerReport(os.getpid(), done=False))
    if not start.wait(STARTUP_TIMEOUT + MAX_SECONDS):
        return
    latencies = array("d")
    errors = 0
    t_start = time.monotonic()
    deadline = t_start + job.seconds
    for _ in range(MAX_REQUESTS_PER_WORKER):
        t0 = time.monotonic()
        if t0 >= deadline:
            break
        ok, message = call()
        t1 = time.monotonic()
        if ok:
            latencies.append(t1 - t0)
        else:
            errors += 1
            first_error = first_error or message
            time.sleep(0.01)  # do not spin on a dead connection
    t_end = time.monotonic()
    close = getattr(handle, "close", None)
    if close is not None:
        close()
    reports.put(
        WorkerReport(
            os.getpid(),
            done=True,
            latencies=latencies.tobytes(),
            errors=errors,
            t_start=t_start,
            t_end=t_end,
            first_error=first_error,
        )
    )


def _gather(
    reports: Queue[WorkerReport], workers: list[BaseProcess], *, done: bool, timeout: float
) -> list[WorkerReport]:
    """One report (ready or done) from every worker, within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    got: list[WorkerReport] = []
    while len(got) < len(workers):
        if not done and any(w.exitcode not in (None, 0) for w in workers):
            raise RuntimeError("a load-generator process died while starting")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            what = "finished" if done else "started"
            raise RuntimeError(f"only {len(got)}/{len(workers)} load generators {what} in time")
        try:
            report = reports.get(timeout=min(remaining, 1.0))
        except Empty:
            continue
        if report.done == done:
            got.append(report)
    return got


def run_python_load(ctx: SpawnContext, job: WorkerJob, concurrency: int, label: str) -> Result:
    reports: Queue[WorkerReport] = ctx.Queue()
    start = ctx.Event()
    workers: list[BaseProcess] = [
        ctx.Process(target=worker_main, args=(job, start, reports), daemon=True)
        for _ in range(concurrency)
    ]
    for worker in workers:
        worker.start()
    try:
        _gather(reports, workers, done=False, timeout=STARTUP_TIMEOUT)
        start.set()
        done = _gather(reports, workers, done=True, timeout=job.seconds + REQUEST_TIMEOUT + 30)
        for worker in workers:
            worker.join(timeout=10)
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
                worker.join(timeout=5)
    latencies = array("d")
    for report in done:
        latencies.frombytes(report.latencies)
    ordered = sorted(latencies)
    # CLOCK_MONOTONIC is system-wide on Linux, so the workers' clocks agree.
    seconds = max(r.t_end for r in done) - min(r.t_start for r in done)
    return Result(
        label=label,
        generator=f"{concurrency} Python processes",
        requests=len(ordered),
        errors=sum(r.errors for r in done),
        seconds=seconds,
        p50_ms=percentile(ordered, 50) * 1e3,
        p90_ms=percentile(ordered, 90) * 1e3,
        p99_ms=percentile(ordered, 99) * 1e3,
        first_error=next((r.first_error for r in done if r.first_error), ""),
    )


# ---------------------------------------------------------------- wrk

WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = "{}"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %(key)s"

local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) bad = 0; first = "" end
function response(status, headers, body)
  if status ~= 200 or string.sub(body, 1, 10) ~= '{"ok":true' then
    bad = bad + 1
    if first == "" then first = "HTTP " .. status .. ": " .. string.sub(body, 1, 200) end
  end
end
function done(summary, latency, requests)
  local b, f = 0, ""
  for _, t in ipairs(threads) do
    b = b + t:get("bad")
    if f == "" then f = t:get("first") end
  end
  local e = summary.errors
  io.write(string.format("BENCH %%d %%d %%d %%d %%d %%d %%d %%d %%d %%d\\n",
    summary.requests, summary.duration, b, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99)))
  io.write("BENCH_FIRST_ERROR " .. f:gsub("\\n", " ") .. "\\n")
end
"""


def run_wrk(
    wrk: str, url: str, *, key: str, seconds: float, concurrency: int, work_dir: Path, label: str
) -> Result:
    script = work_dir / "ping.lua"
    script.write_text(WRK_SCRIPT % {"key": key}, encoding="utf-8")
    threads = max(1, min(concurrency, os.cpu_count() or 1))

    def wrk_for(duration: float) -> subprocess.CompletedProcess[str]:
        command = [
            wrk,
            "-t",
            str(threads),
            "-c",
            str(concurrency),
            "-d",
            f"{duration:g}s",
            "--timeout",
            f"{REQUEST_TIMEOUT:g}s",
            "-s",
            str(script),
            url + PING_PATH,
        ]
        return subprocess.run(
            command, capture_output=True, text=True, timeout=duration + 30, check=False
        )

    # Warm-up (connections, Envoy's upstream connection, the server's worker threads, the
    # key cache), like the Python workers' WARMUP_REQUESTS; not reported.
    wrk_for(WRK_WARMUP_SECONDS)
    done = wrk_for(seconds)
    lines = done.stdout.splitlines()
    numbers = next((line.split()[1:] for line in lines if line.startswith("BENCH ")), None)
    if done.returncode != 0 or numbers is None:
        raise RuntimeError(f"wrk failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    total, duration_us, bad, connect, read, write, timeout, p50, p90, p99 = map(int, numbers)
    first = next(
        (
            line[len("BENCH_FIRST_ERROR ") :]
            for line in lines
            if line.startswith("BENCH_FIRST_ERROR ")
        ),
        "",
    ).strip()
    socket_errors = connect + read + write + timeout
    if socket_errors and not first:
        first = f"socket errors: connect {connect}, read {read}, write {write}, timeout {timeout}"
    return Result(
        label=label,
        generator=f"wrk -t{threads} -c{concurrency}",
        requests=total - bad,
        errors=bad + socket_errors,
        seconds=duration_us / 1e6,
        p50_ms=p50 / 1e3,
        p90_ms=p90 / 1e3,
        p99_ms=p99 / 1e3,
        first_error=first,
    )


# ---------------------------------------------------------------- the stack


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerHandle(Protocol):
    port: int

    def stop(self) -> None: ...


class ChildServer:
    """`python -m loyalty_grpc.runtime.cli serve` as a child process."""

    def __init__(self, *, database_url: str, admin_token: str, work_dir: Path) -> None:
        self.port = free_port()
        self.log_path = work_dir / "serve.log"
        env = dict(
            os.environ,
            LOYALTY_DATABASE_URL=database_url,
            LOYALTY_ADMIN_TOKEN=admin_token,
            LOYALTY_LOG_LEVEL="WARNING",
            LOYALTY_RATE_LIMIT_PER_MINUTE=str(RATE_LIMIT),
        )
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "loyalty_grpc.runtime.cli",
                    "serve",
                    "--grpc-host",
                    "127.0.0.1",
                    "--grpc-port",
                    str(self.port),
                    "--data-dir",
                    str(work_dir / "serve-data"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
            )
        try:
            self._wait_serving()
        except BaseException:
            self.stop()
            raise

    def _wait_serving(self) -> None:
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        deadline = time.monotonic() + STARTUP_TIMEOUT
        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"`loyalty serve` exited with {self.process.returncode}:"
                        f"\n{self.log_path.read_text(errors='replace')}"
                    )
                try:
                    reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("`loyalty serve` did not become ready in time")
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(SERVER_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def fixture_json(key: str) -> str:
    return json.dumps(
        {
            "programas": [
                {
                    "id": "bench",
                    "nombre": "Club Bench",
                    "tasa_puntos": "0.1",
                    "qr_url": "https://bench.example/fan",
                    "claves": [{"clave": key, "integracion": "Kiosko Bench", "permisos": []}],
                    "fans": [],
                }
            ]
        }
    )


@dataclass
class Stack:
    key: str
    grpc_port: int
    http_port: int
    http_url: str
    where: str  # where the gRPC server runs, for the report


@contextlib.contextmanager
def running_stack(work: Path, *, server_process: bool) -> Iterator[Stack]:
    """Fresh embedded PostgreSQL (migrated, one key), the gRPC server with its default
    settings but the call limit raised (RATE_LIMIT), Envoy in front; all on loopback, all
    stopped on exit."""
    from loyalty_grpc.api.server import ServerSettings, build_server
    from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
    from loyalty_grpc.runtime.postgres import start_embedded
    from loyalty_grpc.services.backoffice.fixtures import apply_fixture
    from loyalty_grpc.store.db import make_engine
    from loyalty_grpc.store.migrate import upgrade
    from loyalty_grpc.store.uow import run_in_uow

    key = "lp_vivo_" + secrets.token_hex(16)
    admin_token = secrets.token_urlsafe(24)
    with contextlib.ExitStack() as cleanup:
        db = start_embedded(work / "pgdata", delete_on_stop=True)
        cleanup.callback(db.stop)
        upgrade(db.url)
        engine = make_engine(db.url, pool_size=1)
        try:
            run_in_uow(engine, apply_fixture, fixture_json(key))
        finally:
            engine.dispose()
        server: ServerHandle
        if server_process:
            server = ChildServer(database_url=db.url, admin_token=admin_token, work_dir=work)
            where = "in a child process (`python -m loyalty_grpc.runtime.cli serve`)"
        else:
            grpc_server = build_server(
                ServerSettings(
                    database_url=db.url,
                    admin_token=admin_token,
                    port=0,
                    rate_limit_per_minute=RATE_LIMIT,
                )
            )
            grpc_server.start()
            server = grpc_server
            where = "in the benchmark process"
        cleanup.callback(server.stop)
        proxy = EnvoyProcess.start_spec(
            gateway_spec(
                http_port=free_port(),
                upstreams=(f"127.0.0.1:{server.port}",),
                listen_host="127.0.0.1",
            ),
            work_dir=work / "envoy",
        )
        cleanup.callback(proxy.stop)
        yield Stack(
            key=key,
            grpc_port=server.port,
            http_port=proxy.http_port,
            http_url=proxy.url,
            where=where,
        )


def run(args: argparse.Namespace) -> int:
    wrk = shutil.which("wrk") if args.load_generator in ("auto", "wrk") else None
    if args.load_generator == "wrk" and wrk is None:
        raise SystemExit("error: --load-generator wrk but wrk is not on PATH")
    ctx = multiprocessing.get_context("spawn")
    results: list[Result] = []
    began = time.monotonic()
    print("starting embedded PostgreSQL, gRPC server and Envoy ...", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="loyalty-bench-") as tmp,
        running_stack(Path(tmp), server_process=args.grpc_server_process) as stack,
    ):
        print(
            f"stack up in {time.monotonic() - began:.1f} s; measuring {args.seconds:g} s "
            "per row ...",
            flush=True,
        )
        label_http = "POST /api/v1/ping via Envoy (HTTP/1.1 keep-alive)"
        if wrk is not None:
            results.append(
                run_wrk(
                    wrk,
                    stack.http_url,
                    key=stack.key,
                    seconds=args.seconds,
                    concurrency=args.concurrency,
                    work_dir=Path(tmp),
                    label=label_http,
                )
            )
        else:
            results.append(
                run_python_load(
                    ctx,
                    WorkerJob("http", "127.0.0.1", stack.http_port, stack.key, args.seconds),
                    args.concurrency,
                    label_http,
                )
            )
        results.append(
            run_python_load(
                ctx,
                WorkerJob("grpc", "127.0.0.1", stack.grpc_port, stack.key, args.seconds),
                args.concurrency,
                "Ping over native gRPC, direct to the server",
            )
        )
        where = stack.where
    print_report(results, args=args, where=where, total=time.monotonic() - began)
    return 1 if any(r.errors for r in results) else 0


def print_report(
    results: list[Result], *, args: argparse.Namespace, where: str, total: float
) -> None:
    header = f"{'':52} {'req/s':>8} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'errors':>6}"
    print()
    print(
        f"ping, {args.seconds:g} s per row, concurrency {args.concurrency}; gRPC server "
        f"{where}, 16 worker threads, key cache TTL 5 s; Envoy --concurrency 1"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.label:52} {r.rps:8.0f} {r.p50_ms:7.2f} {r.p90_ms:7.2f} {r.p99_ms:7.2f} "
            f"{r.errors:6d}"
        )
    print()
    for r in results:
        print(f"  {r.label}: {r.requests} OK in {r.seconds:.1f} s, load generator: {r.generator}")
        if r.first_error:
            print(f"    first error: {r.first_error}")
    print(
        f"os.cpu_count() = {os.cpu_count()}. The load generator runs on the same machine "
        "and competes with the server, Envoy and PostgreSQL for these cores."
    )
    print(f"total run time {total:.1f} s (including start-up and shutdown)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument(
        "--seconds",
        type=float,
        default=10.0,
        help=f"measurement time per row (default 10, at most {MAX_SECONDS:g})",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=16,
        help="connections / channels / worker processes (default 16)",
    )
    parser.add_argument(
        "--grpc-server-process",
        action="store_true",
        help="run the gRPC server as a child `loyalty serve` process",
    )
    parser.add_argument(
        "--load-generator",
        choices=("auto", "wrk", "python"),
        default="auto",
        help="HTTP load generator: wrk if on PATH (auto), or Python processes",
    )
    args = parser.parse_args(argv)
    if not 0 < args.seconds <= MAX_SECONDS:
        parser.error(f"--seconds must be in (0, {MAX_SECONDS:g}]")
    if not 1 <= args.concurrency <= MAX_CONCURRENCY:
        parser.error(f"--concurrency must be in [1, {MAX_CONCURRENCY}]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
