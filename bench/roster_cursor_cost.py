"""What binding roster cursors to the database costs a page (docs/roster.md "Cursors across
a failover or a restore"), for the docs (a benchmark, not a test).

    .venv/bin/python bench/roster_cursor_cost.py [--fans 10000] [--rounds 2000]

A fresh embedded PostgreSQL (temporary directory, local disk, no standby), migrated, with
one program of `--fans` fans. Then, `--rounds` times each, interleaved so that the
machine's load hits both alike, in this process:

(a) the page's first statement in its REPEATABLE READ READ ONLY transaction, as before issue
    24 (the horizon, the newest transaction id, the newest change: `BEFORE`, the text of
    that release) and after it (`FEED_STATE`, store/roster_cursors.py's text from issue 24
    to 27: also the cluster's identity and the probe of `desde`'s record; since issue 27
    the page's state and rows are one call, store/roster.PAGE, timed by bench/roster.py);
(b) recording a new cursor (store/roster_cursors.record_cursor: its own committed
    transaction, a WAL flush), what a page that hands out a new cursor adds;
(c) whole quiet polls (services.pos.roster.read_roster with a cursor at the end of the
    feed: (a) now, no record).

Medians and p90 in microseconds. With a synchronous standby, (b) also waits for the
standby's acknowledgement: one network round trip and its flush, not measured here.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import Engine, TextClause, text

from loyalty_grpc.runtime.postgres import start_embedded
from loyalty_grpc.services.pos.roster import read_roster
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.migrate import upgrade
from loyalty_grpc.store.roster_cursors import record_cursor

PROGRAM = "bench"

# The page's first statement before issue 24 (services/pos/roster.py `_HORIZON`).
BEFORE = text(
    "SELECT pg_snapshot_xmin(s)::text::bigint AS horizon, "
    "pg_snapshot_xmax(s)::text::bigint AS newest, "
    "(SELECT max(cambio_xid) FROM fans WHERE programa_id = :programa) AS newest_change "
    "FROM pg_current_snapshot() AS s"
)

# The page's first statement from issue 24 to issue 27 (store/roster_cursors.FEED_STATE).
FEED_STATE = text(
    "SELECT pg_snapshot_xmin(s)::text::bigint AS horizon, "
    "(SELECT max(f.cambio_xid) FROM fans f WHERE f.programa_id = :programa "
    " AND f.cambio_xid < pg_snapshot_xmax(s)::text::bigint) AS newest_change, "
    "c.system_identifier AS sistema, "
    "EXISTS (SELECT FROM roster_cursores r WHERE r.programa_id = :programa "
    " AND r.sistema = c.system_identifier AND r.fase = :fase AND r.xid = :xid "
    " AND r.pk = :pk) AS emitido "
    "FROM pg_current_snapshot() AS s, pg_control_system() AS c"
)


def build(engine: Engine, fans: int) -> None:
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO programas (id, nombre, tasa_puntos) VALUES (:p, 'Bench', 0.1)"),
            {"p": PROGRAM},
        )
        conn.execute(
            text(
                "INSERT INTO fans (programa_id, fan_id, nombre, correo, socio_desde, qr_token) "
                "SELECT :p, 'B' || g, 'Fan ' || g, 'b' || g || '@example.com', 2020, 'q' || g "
                "FROM generate_series(1, :n) g"
            ),
            {"p": PROGRAM, "n": fans},
        )
        conn.execute(text("ANALYZE fans"))


def first_statement(engine: Engine, statement: TextClause, params: dict[str, object]) -> float:
    """One page's first statement in a transaction like the page's."""
    conn = engine.connect().execution_options(
        isolation_level="REPEATABLE READ", postgresql_readonly=True
    )
    began = time.perf_counter()
    with conn, conn.begin():
        conn.execute(statement, params).one()
    return time.perf_counter() - began


def line(label: str, seconds: list[float]) -> str:
    micro = sorted(s * 1e6 for s in seconds)
    p90 = micro[int(len(micro) * 0.9)]
    return f"{label:<58} {statistics.median(micro):>9.0f} {p90:>9.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--fans", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as cleanup:
        work = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="cursor-cost-")))
        db = start_embedded(work / "pgdata", delete_on_stop=True)
        cleanup.callback(db.stop)
        upgrade(db.url)
        engine = make_engine(db.url, pool_size=2)
        cleanup.callback(engine.dispose)
        build(engine, args.fans)
        desde = None
        while True:  # the whole feed: `desde` ends at its end, recorded
            page = read_roster(engine, PROGRAM, desde, 2000, settle_seconds=0)
            desde = page.siguiente
            if not page.hay_mas:
                break
        with engine.connect() as conn:
            sistema = int(
                conn.execute(text("SELECT system_identifier FROM pg_control_system()")).scalar_one()
            )
        probe = {"programa": PROGRAM, "fase": 2, "xid": 1, "pk": 1}
        before: list[float] = []
        now: list[float] = []
        record: list[float] = []
        poll: list[float] = []
        for n in range(args.rounds):
            before.append(first_statement(engine, BEFORE, {"programa": PROGRAM}))
            now.append(first_statement(engine, FEED_STATE, probe))
            began = time.perf_counter()
            record_cursor(engine, PROGRAM, sistema, (2, 10**9 + n, 1), snapshot_page=False)
            record.append(time.perf_counter() - began)
            began = time.perf_counter()
            read_roster(engine, PROGRAM, desde, 500, settle_seconds=0)
            poll.append(time.perf_counter() - began)
        print(
            f"roster cursor cost: {args.fans:,} fans, {args.rounds:,} rounds, "
            f"embedded PostgreSQL, local disk, no standby"
        )
        print(f"{'':<58} {'p50 µs':>9} {'p90 µs':>9}")
        print(line("(a) first statement + its transaction, before issue 24", before))
        print(line("(a) first statement + its transaction, now", now))
        print(line("(b) recording a new cursor (own transaction, committed)", record))
        print(line("(c) a quiet poll (read_roster, nothing new)", poll))
    return 0


if __name__ == "__main__":
    sys.exit(main())
