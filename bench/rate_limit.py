"""What the per-key call limit costs: ping calls/s with and without the limiter (a
benchmark, not a test).

    .venv/bin/python bench/rate_limit.py [--seconds 8] [--concurrency 16] [--rounds 1]

Starts a fresh embedded PostgreSQL (migrated, one key) in a temporary directory and, for
each setting, an in-process gRPC server with the normal settings (16 worker threads, key
cache TTL 5 s, so a ping without the limiter touches no database) and Envoy in front
(`--concurrency 1`, as `loyalty up` runs it); all on loopback. Rows, each `--seconds`:

- `off`: rate_limit_per_minute=0 (no limiter, no RateLimit headers);
- `on`:  rate_limit_per_minute=1_000_000_000 (the limiter runs on every call but never
  rejects), calls reserved in batches as in production (services/rate_limit.py): a busy
  key costs a round trip per batch of up to 64 calls (the slack of so high a limit, a
  sixtieth of it, never binds; at 600 a minute it caps a key's spare calls at 8), and the
  settler thread settles the batches left when a second ends;
- `per call`: the same with rate_limit_batch=1: one `loyalty_limit_reserve` call on
  the key's row per call, the cost of a key's first call in a second (e.g. many keys
  calling now and then);

through Envoy (wrk if on PATH, else Python processes; see bench/ping.py) and over native
gRPC direct (Python processes). All calls use ONE key, i.e. one counter row: the worst
case for the row lock. It also times the statements alone (sequential, one thread: a
request, and the settlement the settler sends) and the limiter alone (16 threads calling
RateLimiter.take on one key, no gRPC).
Every call must succeed; errors are counted and the first one is shown.

Bounds: --seconds at most 60, --rounds at most 3, every request has a 5 s timeout, and the
load generators of bench/ping.py stop at their deadline.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ping import (
    MAX_CONCURRENCY,
    MAX_SECONDS,
    Result,
    WorkerJob,
    fixture_json,
    free_port,
    run_python_load,
    run_wrk,
)

MAX_ROUNDS = 3
STATEMENT_CALLS = 2000
ON_LIMIT = 1_000_000_000
# (row name, rate_limit_per_minute, rate_limit_batch)
SETTINGS = (("off", 0, 0), ("on", ON_LIMIT, 0), ("per call", ON_LIMIT, 1))


@contextlib.contextmanager
def server_and_envoy(
    database_url: str, work: Path, limit: int, batch: int
) -> Iterator[tuple[int, int]]:
    """(gRPC port, HTTP port) of a server with `limit` and Envoy in front of it."""
    from loyalty_grpc.api.server import ServerSettings, build_server
    from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec

    server = build_server(
        ServerSettings(
            database_url=database_url,
            admin_token=secrets.token_urlsafe(24),
            port=0,
            rate_limit_per_minute=limit,
            rate_limit_batch=batch,
        )
    )
    server.start()
    try:
        http_port = free_port()
        proxy = EnvoyProcess.start_spec(
            gateway_spec(http_port=http_port, upstreams=(f"127.0.0.1:{server.port}",)),
            work_dir=work,
        )
        try:
            yield server.port, http_port
        finally:
            proxy.stop()
    finally:
        server.stop()


def statement_cost(database_url: str) -> tuple[float, float]:
    """Microseconds per database request of one call (PgCounters.reserve, settling the
    previous batch as a busy key does) and per settlement of one key's batch
    (PgCounters.settle, what the settler sends); sequential, one thread, warm pool."""
    from sqlalchemy import select

    from loyalty_grpc.domain.rate_limit import LimitKey, Refund, slack
    from loyalty_grpc.store.db import make_engine
    from loyalty_grpc.store.rate_limit import PgCounters
    from loyalty_grpc.store.tables import claves

    engine = make_engine(database_url, pool_size=1)
    slack_calls = slack(ON_LIMIT)
    try:
        with engine.connect() as conn:
            clave_id = LimitKey(
                *conn.execute(select(claves.c.programa_id, claves.c.id).limit(1)).one()
            )
        counters = PgCounters(engine)

        def reserve() -> None:
            reservation = counters.reserve(
                clave_id, 2, ON_LIMIT, Refund(0, 0, 0), slack_calls=slack_calls
            )
            assert reservation.granted == 2

        def settle() -> None:
            counters.settle([(clave_id, Refund(0, 0, 1))])

        costs = []
        for statement in (reserve, settle):
            for _ in range(50):
                statement()
            began = time.perf_counter()
            for _ in range(STATEMENT_CALLS):
                statement()
            costs.append((time.perf_counter() - began) / STATEMENT_CALLS * 1e6)
        return costs[0], costs[1]
    finally:
        engine.dispose()


def limiter_alone(
    database_url: str, seconds: float = 3.0, threads: int = 16
) -> tuple[float, float]:
    """(calls/s, database requests/s) of `RateLimiter.take` itself: `threads` threads, one
    key, batches as in production, no gRPC."""
    import threading

    from sqlalchemy import select

    from loyalty_grpc.domain.rate_limit import LimitKey, Refund
    from loyalty_grpc.services.rate_limit import RateLimiter
    from loyalty_grpc.store.db import make_engine
    from loyalty_grpc.store.rate_limit import PgCounters, Reservation
    from loyalty_grpc.store.tables import claves

    requests = [0]

    class Counting(PgCounters):
        def reserve(
            self,
            clave_id: LimitKey,
            wanted: int,
            limit: int,
            refund: Refund | None = None,
            *,
            slack_calls: int,
            second: int | None = None,
        ) -> Reservation:
            requests[0] += 1
            return super().reserve(
                clave_id, wanted, limit, refund, slack_calls=slack_calls, second=second
            )

    engine = make_engine(database_url, pool_size=threads)
    try:
        with engine.connect() as conn:
            clave_id = LimitKey(
                *conn.execute(select(claves.c.programa_id, claves.c.id).limit(1)).one()
            )
        limiter = RateLimiter(Counting(engine), ON_LIMIT)
        calls = [0] * threads
        deadline = time.monotonic() + seconds

        def hammer(i: int) -> None:
            while time.monotonic() < deadline:
                limiter.take(clave_id)
                calls[i] += 1

        workers = [threading.Thread(target=hammer, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        limiter.close()
        return sum(calls) / seconds, requests[0] / seconds
    finally:
        engine.dispose()


def run(args: argparse.Namespace) -> int:
    from loyalty_grpc.runtime.postgres import start_embedded
    from loyalty_grpc.services.backoffice.fixtures import apply_fixture
    from loyalty_grpc.store.db import make_engine
    from loyalty_grpc.store.migrate import upgrade
    from loyalty_grpc.store.uow import run_in_uow

    wrk = shutil.which("wrk")
    ctx = multiprocessing.get_context("spawn")
    key = "lp_vivo_" + secrets.token_hex(16)
    rows: list[tuple[str, Result]] = []
    with tempfile.TemporaryDirectory(prefix="loyalty-bench-rl-") as tmp:
        work = Path(tmp)
        db = start_embedded(work / "pgdata", delete_on_stop=True)
        try:
            upgrade(db.url)
            engine = make_engine(db.url, pool_size=1)
            run_in_uow(engine, apply_fixture, fixture_json(key))
            engine.dispose()
            micros = statement_cost(db.url)
            alone = limiter_alone(db.url)
            for round_ in range(args.rounds):
                for name, limit, batch in SETTINGS:
                    envoy_dir = work / f"envoy-{name.replace(' ', '-')}-{round_}"
                    envoy_dir.mkdir()
                    with server_and_envoy(db.url, envoy_dir, limit, batch) as (
                        grpc_port,
                        http_port,
                    ):
                        label = f"limiter {name}: POST /api/v1/ping via Envoy"
                        if wrk is not None:
                            result = run_wrk(
                                wrk,
                                f"http://127.0.0.1:{http_port}",
                                key=key,
                                seconds=args.seconds,
                                concurrency=args.concurrency,
                                work_dir=envoy_dir,
                                label=label,
                            )
                        else:
                            result = run_python_load(
                                ctx,
                                WorkerJob("http", "127.0.0.1", http_port, key, args.seconds),
                                args.concurrency,
                                label,
                            )
                        rows.append((name, result))
                        rows.append(
                            (
                                name,
                                run_python_load(
                                    ctx,
                                    WorkerJob("grpc", "127.0.0.1", grpc_port, key, args.seconds),
                                    args.concurrency,
                                    f"limiter {name}: Ping over native gRPC",
                                ),
                            )
                        )
        finally:
            db.stop()
    print_report(rows, args, micros, alone)
    return 1 if any(r.errors for _, r in rows) else 0


def print_report(
    rows: list[tuple[str, Result]],
    args: argparse.Namespace,
    micros: tuple[float, float],
    alone: tuple[float, float],
) -> None:
    header = f"{'':44} {'calls/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6}"
    print()
    print(
        f"ping, one key, {args.seconds:g} s per row, concurrency {args.concurrency}, "
        f"{args.rounds} round(s); server in-process, 16 threads, key cache 5 s"
    )
    print(header)
    print("-" * len(header))
    for _, r in rows:
        print(f"{r.label:44} {r.rps:8.0f} {r.p50_ms:7.2f} {r.p99_ms:7.2f} {r.errors:6d}")
    for _, r in rows:
        if r.first_error:
            print(f"  {r.label}: first error: {r.first_error}")
    print(
        f"\nthe statements alone (sequential, one thread): PgCounters.reserve "
        f"{micros[0]:.0f} us per request, PgCounters.settle {micros[1]:.0f} us per "
        "settlement"
    )
    print(
        f"the limiter alone (RateLimiter.take, 16 threads, one key, no gRPC): "
        f"{alone[0]:,.0f} calls/s with {alone[1]:,.0f} database requests/s"
    )
    print(
        f"os.cpu_count() = {os.cpu_count()}; load generators, Envoy and PostgreSQL share "
        "these cores with the server"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    if not 0 < args.seconds <= MAX_SECONDS:
        parser.error(f"--seconds must be in (0, {MAX_SECONDS:g}]")
    if not 1 <= args.concurrency <= MAX_CONCURRENCY:
        parser.error(f"--concurrency must be in [1, {MAX_CONCURRENCY}]")
    if not 1 <= args.rounds <= MAX_ROUNDS:
        parser.error(f"--rounds must be in [1, {MAX_ROUNDS}]")
    return args


if __name__ == "__main__":
    sys.exit(run(parse_args(None)))
