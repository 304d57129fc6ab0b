"""How the database grows, for docs/backups.md "Growth" (a benchmark, not a test).

    .venv/bin/python bench/growth.py [--ops 2000] [--fans 1000]
        [--match-days 40] [--sales-per-day 30000] [--redemptions-per-day 5000]
        [--roster-changes-per-year 50000]

It starts a fresh embedded PostgreSQL in a temporary directory, migrates it, loads one
program (`--fans` fans, one key, a promotion with `--ops` codes assigned to them), starts
the gRPC server in this process (default settings, the per-key limit raised so it never
refuses: it still counts every call in PostgreSQL) and then, in three phases of `--ops`
operations each, one after the other:

- sales: PosService.RegisterTx over gRPC (PosClient), fresh `id_externo`s, random fans;
- redemptions: PosService.Redeem of the promotion's codes, each once;
- roster changes: a back-office change of one fan's field (services/backoffice/fans.py
  update_fan, what BackofficeService.UpdateFan runs), in one transaction each.

Each phase runs its `--ops` operations twice: a warm-up, then VACUUM ANALYZE (as
autovacuum would have by then: rows updated in place leave space the next updates reuse),
then the measured run. Before and after the measured run (each after a CHECKPOINT, so it
starts as a busy server's would after one: the first change of each page writes the
whole page to the WAL) it reads `pg_total_relation_size` of every table (table + indexes +
TOAST) and `pg_current_wal_lsn()`. It prints, per operation: the bytes every table grew
by, the part of the tables whose rows stay forever (KEPT: the sales, which are also the
idempotency records of `id_externo`, and the ledger), and the WAL bytes; then what a year
costs at the volume given (default: a stadium, 40 match days × 30,000 sales and 5,000
redemptions, plus 50,000 roster changes) in kept bytes (on disk and in every base backup)
and WAL bytes (what the archive receives until retention prunes it). Sizes grow by whole
8 KiB pages: each table's figure is within 8 KiB / --ops of the truth. It prints
os.cpu_count() (it measures bytes, not time: the machine's load does not change them).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _stack import bench_server
from sqlalchemy import Engine, text

from loyalty_grpc.client.pos import PosClient
from loyalty_grpc.runtime.postgres import start_embedded
from loyalty_grpc.services.backoffice.fans import update_fan
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.migrate import upgrade
from loyalty_grpc.store.uow import run_in_uow

PROGRAM = "growth"
PROMO = "Growth Promo"
# Tables whose rows stay forever (the sales, which are also the idempotency records of
# `id_externo`, and the ledger). The others are bounded: rows updated in place (fans,
# codigos, limite_llamadas: one row per key) or drained (wallet_outbox: the wallet sender
# deletes what it delivered; no sender runs here).
KEPT = ("ventas", "movimientos")
TABLES_SQL = """
SELECT c.relname, pg_total_relation_size(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname <> 'alembic_version'
"""


def fixture(key: str, fans: int, codes: int) -> str:
    fan_ids = [f"G{i:06}" for i in range(fans)]
    return json.dumps(
        {
            "programas": [
                {
                    "id": PROGRAM,
                    "nombre": "Club Growth",
                    "tasa_puntos": "0.1",
                    "qr_url": "https://growth.example/fan",
                    "claves": [
                        {
                            "clave": key,
                            "integracion": "Caja Growth",
                            "permisos": ["tx:escribir", "redeem:escribir"],
                        }
                    ],
                    "fans": [
                        {
                            "id": fan_id,
                            "nombre": f"Fan {fan_id}",
                            "correo": f"{fan_id.lower()}@example.com",
                            "socio_desde": 2020,
                            "temporadas": 1,
                            "qr_token": f"qr{fan_id}",
                            "puntos": 100,
                        }
                        for fan_id in fan_ids
                    ],
                    "promos": [
                        {
                            "nombre": PROMO,
                            "estado": "activa",
                            "vigencia_fin": "2099-12-31",
                            "puntos_canje": 25,
                            "codigos": [
                                {
                                    "codigo": f"GR-{i:07}",
                                    "estado": "asignado",
                                    "fan": fan_ids[i % fans],
                                }
                                for i in range(codes)
                            ],
                        }
                    ],
                }
            ]
        }
    )


def snapshot(engine: Engine) -> tuple[dict[str, int], int]:
    """(bytes per table, the WAL position in bytes), after a CHECKPOINT."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("CHECKPOINT"))
        sizes = {str(name): int(size) for name, size in conn.execute(text(TABLES_SQL))}
        wal = int(conn.execute(text("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")).scalar_one())
    return sizes, wal


def vacuum(engine: Engine) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))


def measure(
    engine: Engine, label: str, ops: int, run: Callable[[int], object]
) -> tuple[float, float]:
    """`run(i)` for i in range(ops) as a warm-up, VACUUM (as autovacuum would by then:
    rows updated in place leave space the next updates reuse), then for i in
    range(ops, 2 * ops), measured; prints the growth per operation and returns (bytes of
    the KEPT tables, WAL bytes) per operation."""
    for i in range(ops):
        run(i)
    vacuum(engine)
    before, wal_before = snapshot(engine)
    started = time.monotonic()
    for i in range(ops, 2 * ops):
        run(i)
    seconds = time.monotonic() - started
    after, wal_after = snapshot(engine)
    grown = {name: after[name] - before.get(name, 0) for name in after}
    total = sum(grown.values()) / ops
    kept = sum(grown.get(name, 0) for name in KEPT) / ops
    wal = (wal_after - wal_before) / ops
    parts = ", ".join(
        f"{name} {delta / ops:.0f}"
        for name, delta in sorted(grown.items(), key=lambda x: -x[1])
        if delta
    )
    print(
        f"{label}: {ops} in {seconds:.1f} s; per operation: tables + indexes {total:.0f} B "
        f"({parts or 'none'}), of which kept forever ({' + '.join(KEPT)}) {kept:.0f} B; "
        f"WAL {wal:.0f} B"
    )
    return kept, wal


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=2000, help="operations per phase")
    parser.add_argument("--fans", type=int, default=1000)
    parser.add_argument("--match-days", type=int, default=40)
    parser.add_argument("--sales-per-day", type=int, default=30_000)
    parser.add_argument("--redemptions-per-day", type=int, default=5_000)
    parser.add_argument("--roster-changes-per-year", type=int, default=50_000)
    args = parser.parse_args()
    if args.ops < 1 or args.fans < 1:
        parser.error("--ops and --fans must be at least 1")
    print(f"os.cpu_count() = {os.cpu_count()}; {args.ops} operations per phase, {args.fans} fans")
    key = "lp_vivo_" + secrets.token_hex(16)
    rng = random.Random(24)
    fans = [f"G{i:06}" for i in range(args.fans)]
    with tempfile.TemporaryDirectory(prefix="growth-") as work:
        db = start_embedded(Path(work) / "pgdata", delete_on_stop=True)
        try:
            upgrade(db.url)
            engine = make_engine(db.url, pool_size=2)
            run_in_uow(engine, apply_fixture, fixture(key, args.fans, 2 * args.ops))
            with bench_server(db.url) as server:
                with PosClient.connect(f"127.0.0.1:{server.port}", key) as pos:
                    sale = measure(
                        engine,
                        "sales",
                        args.ops,
                        lambda i: pos.register_sale(
                            f"growth-{i}", rng.choice(fans), centavos=rng.randint(100, 500_000)
                        ),
                    )
                    redemption = measure(
                        engine, "redemptions", args.ops, lambda i: pos.redeem(f"GR-{i:07}")
                    )
                change = measure(
                    engine,
                    "roster changes",
                    args.ops,
                    lambda i: run_in_uow(
                        engine, update_fan, PROGRAM, fans[i % len(fans)], temporadas=2 + i % 20
                    ),
                )
            engine.dispose()
        finally:
            db.stop()
    sales = args.match_days * args.sales_per_day
    redemptions = args.match_days * args.redemptions_per_day
    changes = args.roster_changes_per_year
    year_tables = sales * sale[0] + redemptions * redemption[0] + changes * change[0]
    year_wal = sales * sale[1] + redemptions * redemption[1] + changes * change[1]
    print(
        f"a year of {sales:,} sales ({args.match_days} match days × {args.sales_per_day:,}), "
        f"{redemptions:,} redemptions and {changes:,} roster changes: kept forever "
        f"{human(year_tables)} (the sales' {human(sales * sale[0])}), WAL {human(year_wal)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
