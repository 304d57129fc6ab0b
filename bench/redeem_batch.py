"""POST /api/v1/redeem with a batch of 500 codes (a benchmark, not a test).

    .venv/bin/python bench/redeem_batch.py [--runs 20] [--fans 100000]

On `loyalty up` with the data set of bench/_fullstack.py (all features on), it times one
call at a time through Envoy over HTTP/1.1 keep-alive:

(a) fresh: 500 `asignado` codes of 500 different fans, never redeemed (every call redeems 500
    and credits 500 fans, in one transaction);
(b) again: the same 500 codes (every call answers 500 `duplicado`, nothing written).

Every response is checked (resumen as expected). It prints min/median/max per row and the
core count, and the ledger audit at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))

from _fullstack import KEY, cores_line, full_stack

BATCH = 500


def run(args: argparse.Namespace) -> int:
    print(cores_line(), flush=True)
    codes = BATCH * (args.runs + 1)
    with (
        full_stack(fans=args.fans, codes=codes) as stack,
        httpx.Client(
            base_url=stack.http_url, timeout=30, headers={"Authorization": f"Bearer {KEY}"}
        ) as http,
    ):

        def redeem(batch: list[str], canjeados: int) -> float:
            started = time.perf_counter()
            response = http.post("/api/v1/redeem", json={"codigos": batch})
            seconds = time.perf_counter() - started
            resumen = response.json()["data"]["resumen"]
            if resumen["canjeados"] != canjeados or resumen["recibidos"] != BATCH:
                raise SystemExit(f"error: unexpected answer {resumen}")
            return seconds

        # Codes C00000001… go round-robin over the fans: 500 consecutive ones, 500 fans.
        batches = [
            [f"C{n:08d}" for n in range(1 + i * BATCH, 1 + (i + 1) * BATCH)]
            for i in range(args.runs + 1)
        ]
        redeem(batches[-1], BATCH)  # warm-up
        fresh = [redeem(batch, BATCH) for batch in batches[:-1]]
        again = [redeem(batch, 0) for batch in batches[:-1]]
        print(
            f"{'redeem, 500 codes per call':40} {'runs':>4} {'min ms':>8} {'median':>8} {'max':>8}"
        )
        for label, seconds in (
            ("fresh (500 redeemed, 500 fans credited)", fresh),
            ("again (500 duplicados)", again),
        ):
            ms = sorted(s * 1000 for s in seconds)
            print(
                f"{label:40} {len(ms):4d} {ms[0]:8.1f} {statistics.median(ms):8.1f} {ms[-1]:8.1f}"
            )
        stack.wait_outbox_empty()
        print(stack.audit())
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--fans", type=int, default=100_000)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
