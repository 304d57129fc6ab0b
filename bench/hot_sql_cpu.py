"""PostgreSQL's own CPU per hot-path call, three ways on one server (a benchmark, not a
test): the statements before issue 27, the functions of migrations 0014-0016, and the
current head's (migration 0017).

    .venv/bin/python bench/hot_sql_cpu.py [--rounds 2] [--calls 2000] [--fans 20000]
        [--keys 64] [--old-snapshot]

It starts a fresh embedded PostgreSQL in a temporary directory with three databases:
- `before`: commit 7187527 (the last before issue 27), its source taken with `git archive`
  into the temporary directory; a subprocess running that source migrates the database
  (to 0011) and hands over its statements: the sale (store/sale.py's `SALE`, the form of
  a Fan ID) and the call limit's request (store/rate_limit.py's `_RESERVE`, one upsert);
- `functions`: today's schema at head, with the function bodies of 0014/0015 put back
  (`CREATE OR REPLACE` from those migrations' frozen text), called with store/'s
  statements;
- `head`: today's schema and functions at head, called with store/'s statements.
Each gets one program, `--keys` keys, `--fans` fans and as many sales (with their ledger
rows), then VACUUM ANALYZE (the call limit's table is empty then, as on a new database).
Then `--rounds` rounds; in each, for both operations (`sale`: a new sale of a random fan,
10 points; `ping`: the call limit's request of one call, the keys in turn), every database
in turn (the order rotates) runs `--calls` calls in autocommit on its own connection, as
the service does (psycopg, prepared after 5 uses). Measured: the CPU time of that
connection's backend process (/proc/<pid>/schedstat, nanoseconds: PostgreSQL runs as this
user), so the load other processes put on the machine counts little; the first round's
block is a warm-up (plans cached, data read) and is not counted. It prints, per operation
and database, the microseconds of backend CPU per call (median over the rounds, and each
round) and the ratio to `before`, then per database the ledger audit and how
`limite_llamadas` was read (sequential or index scans). `--old-snapshot` holds a snapshot
open on every database while measuring, as a long transaction of a concurrent load does:
the call limit's updated rows keep their old versions, which a sequential scan reads every
time.

Needs git and the repository's history (commit 7187527).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

BEFORE = "7187527"
PROGRAM = "bench"

LOAD = [
    "INSERT INTO programas (id, nombre, tasa_puntos) VALUES ('bench', 'Bench', 0.1)",
    "INSERT INTO claves (programa_id, hash, modo, integracion, sufijo) "
    "SELECT 'bench', int4send(g), 'vivo', 'bench ' || g, lpad(g::text, 4, '0') "
    "FROM generate_series(1, %(keys)s) AS g",
    "INSERT INTO fans (programa_id, fan_id, nombre, correo, socio_desde, qr_token) "
    "SELECT 'bench', 'F' || g, 'Fan ' || g, 'f' || g || '@example.com', 2020, 'q' || g "
    "FROM generate_series(1, %(fans)s) AS g",
    # Sales and their ledger rows already there, so that the statistics (VACUUM ANALYZE
    # below) are not those of empty tables: the foreign key checks' plans would scan them.
    "INSERT INTO ventas (programa_id, modo, id_externo, fan_pk, importe_centavos, moneda, ts, "
    "puntos, clave_id) "
    "SELECT 'bench', 'vivo', 'v' || g, 1 + g %% %(fans)s, 1000, 'MXN', now(), 10, "
    "(SELECT min(id) FROM claves) FROM generate_series(1, %(fans)s) AS g",
    # (no programa_id: 0011's movimientos has none; at head a trigger fills it)
    "INSERT INTO movimientos (fan_pk, puntos, motivo, venta_id) "
    "SELECT fan_pk, puntos, 'venta', id FROM ventas",
    "UPDATE fans f SET puntos = s.p FROM ("
    "SELECT fan_pk, sum(puntos) AS p FROM movimientos GROUP BY fan_pk) s WHERE s.fan_pk = f.pk",
]

# Run by the interpreter on commit 7187527's source: migrate, print its two statements.
_OLD_SIDE = """
import json, sys
from loyalty_grpc.store import migrate
from loyalty_grpc.store.rate_limit import _RESERVE
from loyalty_grpc.store.sale import SALE
from loyalty_grpc.domain.fan_ref import Forma
migrate.upgrade(sys.argv[1])
print(json.dumps({"sale": SALE[Forma.TEXTO], "reserve": _RESERVE}))
"""


def backend_cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def old_statements(work: Path, url: str) -> dict[str, str]:
    src = work / "before"
    src.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", BEFORE, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    env = {**os.environ, "PYTHONPATH": str(src / "src")}
    done = subprocess.run(
        [sys.executable, "-c", _OLD_SIDE, url],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        raise SystemExit(f"{BEFORE}'s side failed:\n{done.stderr}")
    out = done.stdout
    statements: dict[str, str] = json.loads(out.strip().splitlines()[-1])
    return statements


def put_back_0014_0015(url: str) -> None:
    """The function bodies of migrations 0014 and 0015 (and the outbox trigger of 0016
    doing the version), in place of the head's."""
    m14 = importlib.import_module("loyalty_grpc.store.migrations.versions.0014_hot_paths")
    m15 = importlib.import_module(
        "loyalty_grpc.store.migrations.versions.0015_rate_limit_functions"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        for text in (m14.MOVE, m14.TX, m14.REDEEM, m15.RESERVE):
            conn.execute(text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))


def load(url: str, fans: int, keys: int) -> list[int]:
    """The data set; the keys' ids."""
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in LOAD:
            conn.execute(statement, {"fans": fans, "keys": keys})
        conn.execute("VACUUM ANALYZE")
        return [int(r[0]) for r in conn.execute("SELECT id FROM claves ORDER BY id")]


class Target:
    """One database, one connection, its statements."""

    def __init__(self, name: str, url: str, sale: str, reserve: str) -> None:
        self.name = name
        self.url = url
        self.conn = psycopg.connect(url, autocommit=True)
        row = self.conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        self.pid = int(row[0])
        self.sale_sql = sale
        self.reserve_sql = reserve
        self.claves: list[int] = []
        self.folio = 50_000_000
        self.sales = 0

    def sale(self, fan: int) -> None:
        self.folio += 1
        self.sales += 1
        ref = f"F{fan}"
        row = self.conn.execute(
            self.sale_sql,
            {
                "programa": PROGRAM,
                "forma": "texto",
                "valor": ref,
                "crudo": ref,
                "folio": self.folio,
                "modo": "vivo",
                "id_externo": f"x{self.sales}",
                "centavos": 10_000,
                "moneda": "MXN",
                "terminal": "T1",
                "sitio": None,
                "ts": datetime.now(UTC),
                "puntos": 10,
                "clave_id": self.claves[0],
                "motivo": "venta",
                "nota": "",
            },
        ).fetchone()
        assert row is not None
        assert row[5] is not None, row  # credited

    def ping(self, n: int) -> None:
        row = self.conn.execute(
            self.reserve_sql,
            {
                "programa": PROGRAM,
                "clave_id": self.claves[n % len(self.claves)],
                "pedidas": 1,
                "limite": 1_000_000_000,
                "holgura": 0,
                "segundo": None,
                "dev_segundo": None,
                "dev": 0,
                "dev_reservadas": 0,
            },
        ).fetchone()
        assert row is not None
        assert row[3] == 1, row  # granted

    def block(self, op: str, fans: list[int]) -> float:
        """Backend CPU microseconds per call over one block of calls."""
        call: Callable[[int], None] = getattr(self, op)
        before = backend_cpu_ns(self.pid)
        for fan in fans:
            call(fan)
        return (backend_cpu_ns(self.pid) - before) / 1000 / len(fans)


def audit(url: str) -> int:
    """Fans whose balance is not the sum of their ledger (0 expected). Not store/tables.py's
    LEDGER_MISMATCH_SQL: `before` is at 0011, whose ledger has no `programa_id`."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM fans f WHERE f.puntos <> coalesce("
            "(SELECT sum(m.puntos) FROM movimientos m WHERE m.fan_pk = f.pk), 0)"
        ).fetchone()
        assert row is not None
        return int(row[0])


def scans(url: str) -> str:
    """How the call limit's rows were found: sequential scans read the whole table."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT seq_scan, coalesce(idx_scan, 0), pg_relation_size('limite_llamadas') / 8192 "
            "FROM pg_stat_user_tables WHERE relname = 'limite_llamadas'"
        ).fetchone()
        assert row is not None
        return f"limite_llamadas: {row[0]} sequential scans, {row[1]} index scans, {row[2]} pages"


OPS = ("sale", "ping")


def measure(targets: list[Target], rounds: int, calls: int, fans: int) -> dict[str, list[float]]:
    """Per "op database": microseconds per call of each counted round."""
    rng = random.Random(27)
    results: dict[str, list[float]] = {}
    for rnd in range(rounds + 1):
        for op in OPS:
            chosen = [rng.randint(1, fans) for _ in range(calls)]
            for t in targets[rnd % 3 :] + targets[: rnd % 3]:
                us = t.block(op, chosen)
                if rnd > 0:
                    results.setdefault(f"{op} {t.name}", []).append(us)
    return results


def report(results: dict[str, list[float]], names: list[str]) -> None:
    print(f"{'op':<6} {'database':<10} {'median':>8} {'vs before':>10}  rounds")
    for op in OPS:
        base_us = statistics.median(results[f"{op} before"])
        for name in names:
            runs = results[f"{op} {name}"]
            med = statistics.median(runs)
            print(
                f"{op:<6} {name:<10} {med:8.1f} {med / base_us:9.2f}x  "
                + " ".join(f"{r:.1f}" for r in runs)
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--fans", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=64)
    parser.add_argument(
        "--old-snapshot",
        action="store_true",
        help="hold a snapshot open on each database while measuring (a long transaction: "
        "old row versions stay, as under a concurrent load)",
    )
    args = parser.parse_args()

    from loyalty_grpc.runtime.postgres import start_embedded
    from loyalty_grpc.store import migrate
    from loyalty_grpc.store.rate_limit import _RESERVE
    from loyalty_grpc.store.sale import SALE

    with tempfile.TemporaryDirectory(prefix="bench-hot-sql-") as tmp:
        work = Path(tmp)
        db = start_embedded(work / "pgdata", delete_on_stop=True)
        try:
            urls = {
                name: db.url.replace("/loyalty", f"/{name}", 1)
                for name in ("before", "functions", "head")
            }
            with psycopg.connect(db.url, autocommit=True) as conn:
                for name in urls:
                    conn.execute(f'CREATE DATABASE "{name}"')
            old = old_statements(work, urls["before"])
            for name in ("functions", "head"):
                migrate.upgrade(urls[name])
            put_back_0014_0015(urls["functions"])
            targets = [
                Target("before", urls["before"], old["sale"], old["reserve"]),
                Target("functions", urls["functions"], SALE, _RESERVE),
                Target("head", urls["head"], SALE, _RESERVE),
            ]
            for t in targets:
                t.claves = load(urls[t.name], args.fans, args.keys)
            holders = []
            if args.old_snapshot:
                for url in urls.values():
                    holder = psycopg.connect(url)
                    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    holder.execute("SELECT count(*) FROM fans")
                    holders.append(holder)
            started = time.perf_counter()
            results = measure(targets, args.rounds, args.calls, args.fans)
            elapsed = time.perf_counter() - started
            for holder in holders:
                holder.close()
            print(
                f"backend CPU per call, microseconds ({args.rounds} rounds of {args.calls} "
                f"calls; {args.fans} fans; {args.keys} keys"
                f"{'; a snapshot held' if args.old_snapshot else ''}; {elapsed:.0f} s; "
                f"os.cpu_count()={os.cpu_count()})"
            )
            report(results, list(urls))
            for t in targets:
                t.conn.close()
                print(f"{t.name}: ledger audit {audit(t.url)} fans off; {scans(t.url)}")
        finally:
            db.stop()


if __name__ == "__main__":
    main()
