"""`ping` through Envoy with 1 and with N gRPC worker processes (a benchmark, not a test).

    .venv/bin/python bench/workers.py [--workers 2] [--seconds 10] [--concurrency 16]
                                      [--envoy-max-streams 4]

For each worker count it runs the deployed path, `python -m loyalty_grpc.runtime.cli serve
--workers K` as a child process (port shared with SO_REUSEPORT), on a fresh embedded
PostgreSQL with one key (rate limit off: LOYALTY_RATE_LIMIT_PER_MINUTE=0, metrics off),
Envoy in front (`--concurrency 1`, as `loyalty up` runs it), and measures POST
/api/v1/ping with wrk (or Python load processes, see bench/ping.py) for `--seconds`.
It prints req/s and latency per worker count and `os.cpu_count()`: the load generator,
Envoy and PostgreSQL share the same cores, so the gain is bounded by the idle cores.

Envoy keeps one HTTP/2 connection per upstream (per Envoy thread), and the kernel spreads
connections, not streams, over the workers: without a cap on streams per connection every
call lands on one worker and more workers gain nothing. `--envoy-max-streams N` (default 4;
0 = as gateway/envoy.yaml says) sets the cluster's `http2_protocol_options.
max_concurrent_streams` in the config this benchmark renders, so Envoy opens more
connections.

Bounds: `--seconds` ≤ 60, `--workers` ≤ 16; start-up and shutdown have timeouts.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import multiprocessing
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ping import (
    MAX_SECONDS,
    Result,
    WorkerJob,
    fixture_json,
    free_port,
    run_python_load,
    run_wrk,
)

STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0
MAX_WORKERS = 16


@contextlib.contextmanager
def serve_workers(database_url: str, workers: int, work: Path) -> Iterator[int]:
    """`loyalty serve --workers N` on a free port; yields the port."""
    port = free_port()
    env = dict(
        os.environ,
        LOYALTY_DATABASE_URL=database_url,
        LOYALTY_ADMIN_TOKEN=secrets.token_urlsafe(24),
        LOYALTY_LOG_LEVEL="WARNING",
        # Text: the `gRPC: host:port` line waited for below goes to stdout whatever the
        # level (in JSON it would be an INFO log line, hidden at WARNING).
        LOYALTY_LOG_FORMAT="text",
        LOYALTY_RATE_LIMIT_PER_MINUTE="0",
        LOYALTY_METRICS_PORT="0",
    )
    log_path = work / f"serve-{workers}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loyalty_grpc.runtime.cli",
                "serve",
                "--grpc-host",
                "127.0.0.1",
                "--grpc-port",
                str(port),
                "--workers",
                str(workers),
                "--data-dir",
                str(work / "serve-data"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        ready = re.compile(rf"gRPC: 127\.0\.0\.1:{port} ")
        while not ready.search(log_path.read_text(errors="replace")):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"`loyalty serve` did not start:\n{log_path.read_text()}")
            time.sleep(0.1)
        yield port
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def cap_envoy_streams(limit: int) -> None:
    """Render Envoy's config with at most `limit` streams per upstream connection."""
    from loyalty_grpc.runtime.gateway import config as envoy_config

    load = envoy_config.load_config

    def capped(directory: Path | None = None) -> dict[str, Any]:
        config = load(directory)
        for cluster in config["static_resources"]["clusters"]:
            options = cluster["typed_extension_protocol_options"][
                "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
            ]
            options["explicit_http_config"]["http2_protocol_options"]["max_concurrent_streams"] = (
                limit
            )
        return config

    envoy_config.load_config = capped


def measure(
    args: argparse.Namespace,
    work: Path,
    database_url: str,
    key: str,
    *,
    workers: int,
    wrk: str | None,
) -> Result:
    from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec

    with (
        serve_workers(database_url, workers, work) as port,
        EnvoyProcess.start_spec(
            gateway_spec(
                http_port=free_port(), upstreams=(f"127.0.0.1:{port}",), listen_host="127.0.0.1"
            ),
            work_dir=work / f"envoy-{workers}",
        ) as proxy,
    ):
        label = f"{workers} worker{'s' if workers > 1 else ''}"
        if wrk is not None:
            return run_wrk(
                wrk,
                proxy.url,
                key=key,
                seconds=args.seconds,
                concurrency=args.concurrency,
                work_dir=work,
                label=label,
            )
        ctx = multiprocessing.get_context("spawn")
        return run_python_load(
            ctx,
            WorkerJob("http", "127.0.0.1", proxy.http_port, key, args.seconds),
            args.concurrency,
            label,
        )


def run(args: argparse.Namespace) -> int:
    from loyalty_grpc.runtime.postgres import start_embedded
    from loyalty_grpc.services.backoffice.fixtures import apply_fixture
    from loyalty_grpc.store.db import make_engine
    from loyalty_grpc.store.migrate import upgrade
    from loyalty_grpc.store.uow import run_in_uow

    wrk = shutil.which("wrk")
    key = "lp_vivo_" + secrets.token_hex(16)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="loyalty-bench-workers-") as tmp:
        work = Path(tmp)
        db = start_embedded(work / "pgdata", delete_on_stop=True)
        try:
            upgrade(db.url)
            engine = make_engine(db.url, pool_size=1)
            try:
                run_in_uow(engine, apply_fixture, fixture_json(key))
            finally:
                engine.dispose()
            for workers in sorted({1, args.workers}):
                print(f"measuring {workers} worker(s) for {args.seconds:g} s ...", flush=True)
                results.append(measure(args, work, db.url, key, workers=workers, wrk=wrk))
        finally:
            db.stop()
    print()
    print(
        f"POST /api/v1/ping through Envoy (--concurrency 1, max streams per upstream "
        f"connection {args.envoy_max_streams or 'as configured'}), {args.concurrency} "
        f"connections, {args.seconds:g} s each; os.cpu_count() = {os.cpu_count()}"
    )
    print(f"{'':12} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6}  generator")
    for r in results:
        print(
            f"{r.label:12} {r.rps:8.0f} {r.p50_ms:7.2f} {r.p99_ms:7.2f} {r.errors:6d}  "
            f"{r.generator}"
        )
    for r in results:
        if r.first_error:
            print(f"  {r.label}: first error: {r.first_error}")
    if len(results) == 2 and results[0].rps > 0:
        print(f"gain: x{results[1].rps / results[0].rps:.2f}")
    return 1 if any(r.errors for r in results) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--envoy-max-streams", type=int, default=4)
    args = parser.parse_args(argv)
    if not 0 < args.seconds <= MAX_SECONDS:
        parser.error(f"--seconds must be in (0, {MAX_SECONDS:g}]")
    if not 1 <= args.workers <= MAX_WORKERS:
        parser.error(f"--workers must be in [1, {MAX_WORKERS}]")
    if not 1 <= args.concurrency <= 256:
        parser.error("--concurrency must be in [1, 256]")
    logging.basicConfig(level=logging.WARNING)
    if args.envoy_max_streams > 0:
        cap_envoy_streams(args.envoy_max_streams)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
