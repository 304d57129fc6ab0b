"""GET /api/v1/promos with a promotion of a million codes (a benchmark, not a test).

    .venv/bin/python bench/promos.py [--codes 1000000] [--others 20] [--runs 20]

On a fresh stack in a temporary directory (embedded PostgreSQL, migrations, the gRPC
server, Envoy in front; bench/_stack.py) it loads, with set-based SQL (generate_series),
one promotion of `--codes` codes in all four states (60 % disponible, 20 % asignado, 10 %
canjeado, 10 % liberado) and `--others` promotions of 10,000 codes each, then times:

(a) GET /api/v1/promos through Envoy, right after the bulk load (before any VACUUM: the
    counts must visit the heap, the worst case of a freshly loaded table);
(b) the same after VACUUM ANALYZE (what autovacuum does shortly after a bulk load: the
    index-only scan of ix_codigos_promo_estado no longer visits the heap);
(c) the listing's one statement alone (store.promos.listing_query), on a
    direct connection, and PostgreSQL's own EXPLAIN ANALYZE execution time for it;
(d) for comparison, the same counts written as one pass with count(*) FILTER ×4 (not
    what the service runs).

(b), (c) and (d) run round-robin (one call of each, then again), so that a background
transient weighs on all three alike. It checks that the listed counts are exact, prints
min/median/max per row and the core count. Bounded: at most MAX_CODES codes, MAX_RUNS runs
per row, MAX_SECONDS of measuring (rows stop early past it), a 30 s timeout per request.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _stack import (
    HEADER,
    Timing,
    bulk_codes,
    checkpoint,
    cores_line,
    interleaved,
    running_stack,
    timed,
    vacuum_analyze,
)
from sqlalchemy import text

MAX_CODES = 5_000_000
MAX_OTHERS = 200
MAX_RUNS = 200
MAX_SECONDS = 90.0
OTHER_CODES = 10_000
BIG = "Un millón"
# The other way to write the counts, timed for comparison (store/promos.py).
FILTER_ALTERNATIVE = """
SELECT p.id, p.nombre, p.estado, p.vigencia_fin, i.*
FROM promos p CROSS JOIN LATERAL (
  SELECT count(*) FILTER (WHERE estado = 'disponible') AS disponibles,
         count(*) FILTER (WHERE estado = 'asignado') AS asignados,
         count(*) FILTER (WHERE estado = 'canjeado') AS canjeados,
         count(*) FILTER (WHERE estado = 'liberado') AS liberados
  FROM codigos c WHERE c.promo_id = p.id) i
WHERE p.programa_id = 'bench' ORDER BY p.id"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument(
        "--codes",
        type=int,
        default=1_000_000,
        help=f"codes of the big promotion (default 1,000,000, at most {MAX_CODES:,})",
    )
    parser.add_argument(
        "--others",
        type=int,
        default=20,
        help=f"other promotions of {OTHER_CODES:,} codes (default 20)",
    )
    parser.add_argument("--runs", type=int, default=20, help="calls per row (default 20)")
    args = parser.parse_args(argv)
    if not 1 <= args.codes <= MAX_CODES:
        parser.error(f"--codes must be in [1, {MAX_CODES}]")
    if not 0 <= args.others <= MAX_OTHERS:
        parser.error(f"--others must be in [0, {MAX_OTHERS}]")
    if not 1 <= args.runs <= MAX_RUNS:
        parser.error(f"--runs must be in [1, {MAX_RUNS}]")
    return args


def expected_inventory(count: int) -> dict[str, int]:
    """The counts bulk_codes' state mix gives for codes 1..count (g % 10)."""
    by_rest = [sum(1 for _ in range(r, count + 1, 10)) if r else count // 10 for r in range(10)]
    return {
        "disponibles": sum(by_rest[0:6]),
        "asignados": sum(by_rest[6:8]),
        "canjeados": by_rest[8],
        "liberados": by_rest[9],
    }


def run(args: argparse.Namespace) -> int:
    from loyalty_grpc.store.promos import listing_query

    began = time.monotonic()
    others = [f"Otra {i:03d}" for i in range(args.others)]
    print("starting embedded PostgreSQL, gRPC server and Envoy ...", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="loyalty-bench-") as tmp,
        running_stack(Path(tmp), [BIG, *others]) as stack,
        httpx.Client(
            base_url=stack.http_url, timeout=30, headers={"Authorization": f"Bearer {stack.key}"}
        ) as http,
    ):
        big_id = stack.promo_id(BIG)
        load = bulk_codes(stack.engine, big_id, args.codes, prefix="M", mixed=True)
        for nombre in others:
            load += bulk_codes(
                stack.engine, stack.promo_id(nombre), OTHER_CODES, prefix="O", mixed=True
            )
        checkpoint(stack.engine)
        total = args.codes + args.others * OTHER_CODES
        print(
            f"loaded {total:,} codes in {load:.1f} s (set-based INSERT … SELECT generate_series)",
            flush=True,
        )

        def listing() -> None:
            response = http.get("/api/v1/promos")
            if response.status_code != 200:
                raise SystemExit(f"error: HTTP {response.status_code}: {response.text[:300]}")
            promos = response.json()["data"]["promos"]
            big = next(p for p in promos if p["id"] == big_id)
            if (
                big["inventario"] != expected_inventory(args.codes)
                or len(promos) != 1 + args.others
            ):
                raise SystemExit(f"error: wrong listing: {big}")

        query = listing_query("bench")

        def query_alone() -> None:
            with stack.engine.connect() as conn:
                conn.execute(query).all()

        def filter_alternative() -> None:
            with stack.engine.connect() as conn:
                conn.execute(text(FILTER_ALTERNATIVE)).all()

        deadline = time.monotonic() + MAX_SECONDS
        rows: list[Timing] = []
        listing()  # warm-up: connections, key cache, plan
        rows.append(
            timed(
                "GET /api/v1/promos via Envoy, before VACUUM", args.runs, listing, deadline=deadline
            )
        )
        vacuumed = vacuum_analyze(stack.engine)
        for _ in range(3):  # warm-up after VACUUM
            listing()
        rows += interleaved(
            {
                "GET /api/v1/promos via Envoy, after VACUUM ANALYZE": listing,
                "the listing statement alone (direct connection)": query_alone,
                "not used: one pass, count(*) FILTER (WHERE estado=…) ×4": filter_alternative,
            },
            args.runs,
            deadline=deadline,
        )
        sql = str(
            query.compile(dialect=stack.engine.dialect, compile_kwargs={"literal_binds": True})
        )
        with stack.engine.connect() as conn:
            plan = [r[0] for r in conn.execute(text("EXPLAIN (ANALYZE, BUFFERS) " + sql))]

    print()
    print(
        f"promos: 1 promotion of {args.codes:,} codes + {args.others} of {OTHER_CODES:,}; "
        "listing checked exact on every call"
    )
    print(HEADER)
    print("-" * len(HEADER))
    for row in rows:
        print(row.row())
    print()
    print(
        f"VACUUM ANALYZE codigos + CHECKPOINT took {vacuumed:.1f} s. EXPLAIN ANALYZE of "
        "the statement (after VACUUM; its per-row timing adds overhead):"
    )
    for line in plan:
        if any(word in line for word in ("Index Only Scan", "Heap Fetches", "Execution Time")):
            print("   ", line.strip())
    print(cores_line())
    print(f"total run time {time.monotonic() - began:.1f} s (including start-up and load)")
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING)
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
