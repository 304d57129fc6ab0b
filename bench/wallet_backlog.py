"""The wallet sender against a large backlog (a benchmark, not a test).

    .venv/bin/python bench/wallet_backlog.py [--rows 1000000] [--plan-fans 1000000]
        [--fans 100000] [--clients 8] [--steady-seconds 20] [--skip-plans] [--skip-drain]

1. Plans (an embedded PostgreSQL of its own, no server, autovacuum off on the wallet
   tables so that nothing cleans up behind the measurement): `--plan-fans` fans, then
   EXPLAIN (ANALYZE, BUFFERS) of the sender's ingest (5,000 outbox rows) and claim (1,000
   fans), each rolled back, with 100 and with `--rows` pending outbox rows / waiting
   balances (there also with the same LIMIT 100 as the small case), and each statement's
   median time over 20 runs. Then the worst case of a
   queue between two vacuums: the ingest after 500,000 rows were taken and the claim after
   100,000 deliveries were recorded (their dead index entries are still there), and the
   same after VACUUM.
2. Drain under load (bench/_fullstack.py: `loyalty up`, Envoy, the workers and the wallet
   sender with the local provider, 100,000 fans): the sender's CPU per sale with sales
   alone (wrk `tx` through Envoy at `--clients`), then `--rows` outbox rows for random fans
   appear at once (as after a provider outage) while the same sales go on, and it reports
   how fast the backlog is ingested and delivered: rows/s, deliveries/s, the sender
   process's and PostgreSQL's CPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _fullstack import (
    HZ,
    FullStack,
    _proc_table,
    cores_line,
    cpu_ns,
    cpu_snapshot,
    full_stack,
    start_wrk,
)
from hot_paths import OPS
from sqlalchemy import Engine, TextClause, text

from loyalty_grpc.runtime.wallet import SENDER_APPLICATION
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.wallet import DUE_AT_ONCE
from loyalty_grpc.wallet.config import BATCH
from loyalty_grpc.wallet.outbox import INGEST_BATCH, send_pending
from loyalty_grpc.wallet.providers import LocalProvider

CLAIM_BATCH = BATCH["local"]
TIMING_RUNS = 20
# The sender's two halves of a program's turn (migration 0016's function): ingest alone,
# claim alone. A function call's plan is a Function Scan: the times are what they measure.
INGEST_SQL = text("SELECT * FROM loyalty_wallet_turno('plan', :n, 0, :due, :now, :lease_until)")
CLAIM_SQL = text("SELECT * FROM loyalty_wallet_turno('plan', 0, :n, :due, :now, :lease_until)")
FANS_SQL = """
INSERT INTO programas (id, nombre, tasa_puntos) VALUES ('plan', 'Plan', 0.1);
INSERT INTO fans (programa_id, fan_id, nombre, correo, socio_desde, qr_token)
SELECT 'plan', 'P' || g, 'Fan ' || g, 'p' || g || '@example.com', 2020, 'qr-' || g
FROM generate_series(1, {fans}) AS g;
ALTER TABLE wallet_outbox SET (autovacuum_enabled = off);
ALTER TABLE wallet_pases SET (autovacuum_enabled = off);
"""
# `rows` balances for fans spread over the whole table (a balance grows with its row).
OUTBOX_SQL = """
INSERT INTO wallet_outbox (programa_id, fan_pk, saldo)
SELECT 'plan', lo + mod(CAST(g AS bigint) * 7919, hi - lo + 1), g
FROM (SELECT min(pk) AS lo, max(pk) AS hi FROM fans) AS f, generate_series(1, {rows}) AS g
"""
# Every fan waiting with a balance, due.
PENDING_SQL = """
INSERT INTO wallet_pases (programa_id, fan_pk, saldo_pendiente, saldo_id, pendiente_desde,
                          proximo_intento)
SELECT programa_id, pk, 1, 1, now() - interval '1 hour' + pk * interval '1 microsecond',
       '1970-01-01Z' FROM fans
ON CONFLICT (programa_id, fan_pk) DO UPDATE SET saldo_pendiente = 1, saldo_id = 1,
    pendiente_desde = excluded.pendiente_desde, proximo_intento = excluded.proximo_intento
"""


def _autocommit(engine: Engine, sql: str, **fill: object) -> None:
    """Each statement of `sql` (`{name}` filled from `fill`) in its own transaction."""
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        for statement in sql.format(**fill).split(";\n"):
            if statement.strip():
                conn.exec_driver_sql(statement)


def _params(statement: TextClause, batch: int | None) -> dict[str, Any]:
    now = datetime.now(UTC)
    n = (batch or INGEST_BATCH) if statement is INGEST_SQL else (batch or CLAIM_BATCH)
    return {"n": n, "due": DUE_AT_ONCE, "now": now, "lease_until": now + timedelta(minutes=5)}


def explain(
    engine: Engine,
    label: str,
    statement: TextClause,
    *,
    batch: int | None = None,
    plan: bool = True,
) -> None:
    """EXPLAIN (ANALYZE, BUFFERS) once, then the median of TIMING_RUNS executions; every
    one rolled back. `batch`: the LIMIT (default: the sender's)."""
    with engine.connect() as conn:
        conn.exec_driver_sql("SET plan_cache_mode = force_custom_plan")
        lines = [
            r[0]
            for r in conn.execute(
                text(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {statement.text}"),
                _params(statement, batch),
            )
        ]
        conn.rollback()
        times = []
        for _ in range(TIMING_RUNS):
            started = time.perf_counter()
            result = conn.execute(statement, _params(statement, batch)).all()
            times.append(time.perf_counter() - started)
            conn.rollback()
    ingest = statement is INGEST_SQL
    taken = f"{result[0].filas} rows taken" if ingest else f"{len(result) - 1} fans claimed"
    print(
        f"\n--- {label} (LIMIT {_params(statement, batch)['n']}): {taken}, median "
        f"{1000 * statistics.median(times):.2f} ms over {TIMING_RUNS} runs (rolled back)"
    )
    if plan:
        print("\n".join(lines))


def count(engine: Engine, sql: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(sql)).scalar_one())


def plans(args: argparse.Namespace) -> None:
    from loyalty_grpc.runtime.postgres import start_embedded
    from loyalty_grpc.store.migrate import upgrade

    work = Path(tempfile.mkdtemp(prefix="loyalty-wallet-plans-"))
    db = start_embedded(work / "pgdata", delete_on_stop=True)
    engine = make_engine(db.url, pool_size=2)
    try:
        upgrade(db.url)
        started = time.monotonic()
        _autocommit(engine, FANS_SQL, fans=args.plan_fans)
        _autocommit(engine, "VACUUM ANALYZE fans")
        print(f"plans: {args.plan_fans:,} fans ({time.monotonic() - started:.0f} s)", flush=True)

        _autocommit(engine, OUTBOX_SQL, rows=100)
        _autocommit(engine, "ANALYZE wallet_outbox")
        explain(engine, "ingest, 100 outbox rows pending", INGEST_SQL)
        with engine.begin() as conn:
            conn.execute(INGEST_SQL, _params(INGEST_SQL, None))
        _autocommit(engine, "VACUUM ANALYZE wallet_outbox, wallet_pases")
        explain(engine, "claim, 100 fans waiting", CLAIM_SQL)

        started = time.monotonic()
        _autocommit(engine, OUTBOX_SQL, rows=args.rows)
        _autocommit(engine, PENDING_SQL)
        _autocommit(engine, "VACUUM ANALYZE wallet_outbox, wallet_pases")
        print(
            f"\nplans: {args.rows:,} outbox rows and {args.plan_fans:,} fans waiting "
            f"({time.monotonic() - started:.0f} s)",
            flush=True,
        )
        explain(engine, f"ingest, {args.rows:,} outbox rows pending", INGEST_SQL)
        explain(engine, f"claim, {args.plan_fans:,} fans waiting", CLAIM_SQL)
        # The same batches as with 100 pending.
        explain(engine, f"ingest, {args.rows:,} outbox rows pending", INGEST_SQL, batch=100)
        explain(engine, f"claim, {args.plan_fans:,} fans waiting", CLAIM_SQL, batch=100)

        # Between two vacuums: what the index scans step over.
        taken = min(500_000, args.rows // 2)
        started = time.monotonic()
        with engine.begin() as conn:
            conn.execute(
                text(
                    "DELETE FROM wallet_outbox WHERE (programa_id, id) IN (SELECT "
                    "programa_id, id FROM wallet_outbox ORDER BY id LIMIT :n)"
                ),
                {"n": taken},
            )
        delivered = min(100_000, args.plan_fans // 2)
        report = drain_some(engine, delivered)
        print(
            f"\nplans: {taken:,} outbox rows taken and {report:,} fans delivered, "
            f"no vacuum since ({time.monotonic() - started:.0f} s)",
            flush=True,
        )
        explain(engine, f"ingest, {taken:,} rows taken since the last vacuum", INGEST_SQL)
        explain(engine, f"claim, {report:,} deliveries since the last vacuum", CLAIM_SQL)
        started = time.monotonic()
        _autocommit(engine, "VACUUM wallet_outbox, wallet_pases")
        print(f"\nplans: VACUUM ({time.monotonic() - started:.1f} s)", flush=True)
        explain(engine, "ingest, after VACUUM", INGEST_SQL)
        explain(engine, "claim, after VACUUM", CLAIM_SQL)
    finally:
        engine.dispose()
        db.stop()


def drain_some(engine: Engine, fans: int) -> int:
    """Deliver about `fans` waiting fans with the local provider (ingesting a row a run)."""
    provider = LocalProvider(engine)
    delivered = 0
    while delivered < fans:
        report = send_pending(engine, provider, batch=CLAIM_BATCH, ingest_batch=1, ingest_rounds=1)
        delivered += report.delivered
        if report.claimed == 0:
            break
    return delivered


# ---------------------------------------------------------------- drain under load


def sender_backends(stack: FullStack) -> set[int]:
    """The PostgreSQL backends of the wallet sender's connections."""
    out = stack.psql(
        f"SELECT pid FROM pg_stat_activity WHERE application_name = '{SENDER_APPLICATION}'"
    )
    return {int(x) for x in out.split()}


def ticks(pids: set[int]) -> int:
    table = _proc_table()
    return sum(table[p][2] for p in pids if p in table)


@contextmanager
def sales(stack: FullStack, clients: int) -> Iterator[None]:
    tx = next(op for op in OPS if op.name == "tx")
    load = start_wrk(
        stack.http_url,
        tx.wrk.replace("{fans}", str(stack.fans)),
        clients=clients,
        seconds=3600,
        work=stack.work,
    )
    try:
        yield
    finally:
        load.terminate()
        load.wait(30)


def last_id(stack: FullStack, table: str) -> int:
    """How many rows `table` has (its ids have gaps: folios come in blocks per process)."""
    return int(stack.psql(f"SELECT count(*) FROM {table}"))


def steady(stack: FullStack, args: argparse.Namespace) -> None:
    """Sales alone: the sender's share of the CPU per sale."""
    with sales(stack, args.clients):
        time.sleep(3)
        backends = sender_backends(stack)
        sale0, entrega0 = last_id(stack, "ventas"), last_id(stack, "wallet_entregas")
        parent0, pg0, all0 = cpu_ns(stack.up.pid), ticks(backends), cpu_snapshot(stack)
        started = time.monotonic()
        time.sleep(args.steady_seconds)
        elapsed = time.monotonic() - started
        parent1, pg1, all1 = cpu_ns(stack.up.pid), ticks(backends), cpu_snapshot(stack)
        sold = last_id(stack, "ventas") - sale0
        delivered = last_id(stack, "wallet_entregas") - entrega0
    idle0 = cpu_ns(stack.up.pid)
    time.sleep(5)
    idle = (cpu_ns(stack.up.pid) - idle0) / 5  # ns/s with no sales: supervision, idle runs
    sender_ns = parent1 - parent0
    print(
        f"\nsteady state, {args.clients} clients of `tx` through Envoy for {elapsed:.0f} s: "
        f"{sold / elapsed:.0f} sales/s, {delivered / elapsed:.0f} wallet deliveries/s"
    )
    print(
        f"  `loyalty up` parent (the wallet sender, supervision): "
        f"{sender_ns / 1000 / max(sold, 1):.1f} µs CPU per sale "
        f"({(sender_ns - idle * elapsed) / 1000 / max(sold, 1):.1f} µs above its idle "
        f"{idle / 1e6:.2f} ms/s)"
    )
    print(
        f"  the sender's PostgreSQL backends: "
        f"{1e6 * (pg1 - pg0) / HZ / max(sold, 1):.1f} µs CPU per sale"
    )
    server = (all1.server - all0.server) / HZ
    print(
        f"  all server processes (workers + parent): {1000 * server / max(sold, 1):.3f} ms "
        f"CPU per sale; PostgreSQL {1000 * (all1.pg - all0.pg) / HZ / max(sold, 1):.3f} ms"
    )


def backlog_drain(stack: FullStack, args: argparse.Namespace) -> None:
    """`--rows` outbox rows at once, while sales go on: how fast they are delivered."""
    with sales(stack, args.clients):
        time.sleep(3)
        started = time.monotonic()
        stack.psql(OUTBOX_SQL.format(rows=args.rows))
        inserted = time.monotonic()
        print(
            f"\nbacklog: {args.rows:,} outbox rows for {stack.fans:,} fans inserted in "
            f"{inserted - started:.1f} s (one transaction), sales going on",
            flush=True,
        )
        backends = sender_backends(stack)
        sale0, entrega0 = last_id(stack, "ventas"), last_id(stack, "wallet_entregas")
        parent0, pg0, all0 = cpu_ns(stack.up.pid), ticks(backends), cpu_snapshot(stack)
        ingested_at = None
        while True:
            time.sleep(0.5)
            outbox, waiting = (
                int(x)
                for x in stack.psql(
                    "SELECT (SELECT count(*) FROM wallet_outbox), (SELECT count(*) FROM "
                    "wallet_pases WHERE pendiente_desde IS NOT NULL)"
                ).split("|")
            )
            now = time.monotonic()
            if ingested_at is None and outbox < 1000:
                ingested_at = now
            if outbox < 1000 and waiting < 1000:  # what the ongoing sales keep pending
                break
            if now - inserted > 1800:
                raise SystemExit("error: the backlog did not drain in 30 min")
        done = time.monotonic()
        backends |= sender_backends(stack)
        parent1, pg1, all1 = cpu_ns(stack.up.pid), ticks(backends), cpu_snapshot(stack)
        sold = last_id(stack, "ventas") - sale0
        delivered = last_id(stack, "wallet_entregas") - entrega0
    elapsed = done - inserted
    ingest_time = (ingested_at or done) - inserted
    rows = args.rows + sold
    print(
        f"  ingested (outbox empty) after {ingest_time:.1f} s: "
        f"{args.rows / ingest_time:,.0f} rows/s"
    )
    print(
        f"  drained (nothing waiting) after {elapsed:.1f} s: {args.rows / elapsed:,.0f} "
        f"backlog balances/s; {delivered:,} deliveries ({delivered / elapsed:,.0f}/s) "
        f"for {rows:,} balances (coalesced {rows / max(delivered, 1):.1f} : 1); "
        f"{sold / elapsed:.0f} sales/s meanwhile"
    )
    print(
        f"  the sender process: {(parent1 - parent0) / 1e9:.1f} s CPU "
        f"({(parent1 - parent0) / 1000 / rows:.1f} µs per balance, "
        f"{(parent1 - parent0) / 1000 / max(delivered, 1):.1f} µs per delivery); its "
        f"PostgreSQL backends {(pg1 - pg0) / HZ:.1f} s "
        f"({1e6 * (pg1 - pg0) / HZ / rows:.1f} µs per balance)"
    )
    print(
        f"  whole machine {(all1.machine - all0.machine) / HZ:.1f} s CPU over "
        f"{elapsed:.1f} s ({os.cpu_count()} cores); all PostgreSQL "
        f"{(all1.pg - all0.pg) / HZ:.1f} s, server processes "
        f"{(all1.server - all0.server) / HZ:.1f} s"
    )


def run(args: argparse.Namespace) -> int:
    print(cores_line(), flush=True)
    if not args.skip_plans:
        plans(args)
    if not args.skip_drain:
        with full_stack(fans=args.fans, codes=1000) as stack:
            steady(stack, args)
            backlog_drain(stack, args)
            print(stack.audit())
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--plan-fans", type=int, default=1_000_000)
    parser.add_argument("--fans", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--steady-seconds", type=float, default=20.0)
    parser.add_argument("--skip-plans", action="store_true")
    parser.add_argument("--skip-drain", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
