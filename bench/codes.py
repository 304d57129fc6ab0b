"""POST /api/v1/codes with 5000 codes per call (a benchmark, not a test).

    .venv/bin/python bench/codes.py [--runs 10] [--preload 1000000]

On a fresh stack in a temporary directory (embedded PostgreSQL, migrations, the gRPC
server, Envoy in front; bench/_stack.py) it times, one call at a time through Envoy over
HTTP/1.1 keep-alive:

(a) fresh: 5000 new codes as a JSON array (every call adds 5000) into an empty promotion;
(b) resent: the same 5000 codes again (every call adds 0, 5000 duplicados);
(c) fresh as pasted text: 5000 new codes in one string, newline-separated;
(d) fresh into a promotion that already holds `--preload` codes (set-based
    generate_series, then VACUUM ANALYZE): the insert is the same, the inventory
    returned after the call counts the whole promotion.

Every response is checked (agregados/duplicados as expected). It prints min/median/max per
row, the codes per second of the median call, and the core count. Bounded: at most
MAX_RUNS runs per row, MAX_PRELOAD preloaded codes, MAX_SECONDS of measuring (rows stop
early past it), a 30 s timeout per request.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from _stack import HEADER, Timing, bulk_codes, cores_line, running_stack, timed, vacuum_analyze

PER_CALL = 5000
MAX_RUNS = 100
MAX_PRELOAD = 5_000_000
MAX_SECONDS = 90.0
PROMOS = ["Vacía", "Reenvío", "ByText", "Precargada"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--runs", type=int, default=10, help="calls per row (default 10)")
    parser.add_argument(
        "--preload",
        type=int,
        default=1_000_000,
        help="codes already in the promotion of row (d) (default 1,000,000; 0 skips the row)",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.runs <= MAX_RUNS:
        parser.error(f"--runs must be in [1, {MAX_RUNS}]")
    if not 0 <= args.preload <= MAX_PRELOAD:
        parser.error(f"--preload must be in [0, {MAX_PRELOAD}]")
    return args


def run(args: argparse.Namespace) -> int:
    began = time.monotonic()
    batches = itertools.count()
    print("starting embedded PostgreSQL, gRPC server and Envoy ...", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="loyalty-bench-") as tmp,
        running_stack(Path(tmp), PROMOS) as stack,
        httpx.Client(
            base_url=stack.http_url, timeout=30, headers={"Authorization": f"Bearer {stack.key}"}
        ) as http,
    ):
        ids = {nombre: stack.promo_id(nombre) for nombre in PROMOS}
        if args.preload:
            load = bulk_codes(stack.engine, ids["Precargada"], args.preload, prefix="P", mixed=True)
            vacuum_analyze(stack.engine)
            print(f"preloaded {args.preload:,} codes in {load:.1f} s", flush=True)

        def new_batch() -> list[str]:
            n = next(batches)
            return [f"B{n:04d}-{i:05d}" for i in range(PER_CALL)]

        def deposit(promo: str, codes: object, agregados: int) -> None:
            response = http.post("/api/v1/codes", json={"promo": ids[promo], "codigos": codes})
            if response.status_code != 200:
                raise SystemExit(f"error: HTTP {response.status_code}: {response.text[:300]}")
            data = response.json()["data"]
            if (data["recibidos"], data["agregados"]) != (PER_CALL, agregados):
                raise SystemExit(f"error: unexpected counts: {data}")

        resent = new_batch()
        deposit("Reenvío", resent, PER_CALL)
        deposit("Vacía", new_batch(), PER_CALL)  # warm-up
        rows_spec: list[tuple[str, Callable[[], None]]] = [
            ("(a) 5000 new codes, JSON array", lambda: deposit("Vacía", new_batch(), PER_CALL)),
            ("(b) the same 5000 codes resent (0 added)", lambda: deposit("Reenvío", resent, 0)),
            (
                "(c) 5000 new codes as pasted text",
                lambda: deposit("ByText", "\n".join(new_batch()), PER_CALL),
            ),
        ]
        if args.preload:
            rows_spec.append(
                (
                    f"(d) 5000 new codes into a promotion of {args.preload:,}",
                    lambda: deposit("Precargada", new_batch(), PER_CALL),
                )
            )
        deadline = time.monotonic() + MAX_SECONDS
        rows: list[Timing] = [
            timed(label, args.runs, call, deadline=deadline) for label, call in rows_spec
        ]

    print()
    print(f"codes: POST /api/v1/codes via Envoy, {PER_CALL} codes per call, one call at a time")
    print(HEADER + f" {'codes/s':>9}")
    print("-" * (len(HEADER) + 10))
    for row in rows:
        rate = PER_CALL / statistics.median(row.seconds)
        print(row.row() + f" {rate:9,.0f}")
    print(cores_line())
    print(f"total run time {time.monotonic() - began:.1f} s (including start-up and load)")
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING)
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
