"""The roster feed at scale, for docs/performance.md (a benchmark, not a test).

    .venv/bin/python bench/roster.py [--fans 1000000] [--limite 2000] [--changes 20000]

It starts a fresh embedded PostgreSQL in a temporary directory, migrates it and builds,
with set-based SQL (generate_series, a few statements), a program of `--fans` fans (one in
50 in `baja`; each balance backed by a ledger entry) plus a second program of
`--fans / 10` fans whose rows are interleaved with the first's (so the program filter
matters), then VACUUM ANALYZE. Then it starts the gRPC server (default settings) and
Envoy in this process, on loopback, and measures:

(a) the full snapshot through Envoy: GET /api/v1/roster?limite=… following `siguiente`
    until `hay_mas` is false, one keep-alive HTTP/1.1 connection, JSON parsed by the
    client; fans/s and the page latency;
(b) the same snapshot through the service alone (services.roster.read_roster in this
    process: SQL + rows, no gRPC, no JSON);
(c) `--changes` balance changes in transactions of 1,000 random fans, then the changes
    after the snapshot, followed page by page both ways; time per change page;
(d) the plans (ANALYZE, BUFFERS) of a change page's and a snapshot page's fan query, as
    the page function (migration 0013, store.roster.PAGE) runs them, caught by
    auto_explain of its nested statements, with the parameters of a real page in the
    middle of the feed: each must be one Index Scan (no Seq Scan, no Sort, no OFFSET).

Every fan is counted: the snapshot must deliver exactly `--fans` distinct fans and the
change pages at least the distinct fans changed. Bounds: at most --max-pages pages per
loop, a 10 s timeout per HTTP call, a 30 min overall alarm.
It prints os.cpu_count(): the client, Envoy, the server and PostgreSQL share the cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx
from _stack import bench_server
from sqlalchemy import Engine, text

from loyalty_grpc.domain.roster_cursor import Fase, decode_cursor
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
from loyalty_grpc.runtime.postgres import start_embedded
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.services.pos.roster import read_roster
from loyalty_grpc.store.autocommit import autocommit
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.migrate import upgrade
from loyalty_grpc.store.roster import PAGE
from loyalty_grpc.store.uow import run_in_uow

T = TypeVar("T")
PROGRAM = "bench"
OTHER = "otro"
OVERALL_SECONDS = 1800
CHANGE_BATCH = 1000

BUILD_SQL = """
INSERT INTO fans (programa_id, fan_id, nombre, correo, socio_desde, temporadas, qr_token,
                  puntos, estado, baja_en, baja_motivo)
SELECT CASE WHEN g % 11 = 0 THEN :other ELSE :program END,
       'F' || lpad(g::text, 8, '0'), 'Fan número ' || g, 'fan' || g || '@example.com',
       1990 + g % 36, g % 20, 'qr' || md5(g::text), (g::bigint * 7919) % 5000,
       CASE WHEN g % 50 = 0 THEN 'baja' ELSE 'activo' END,
       CASE WHEN g % 50 = 0 THEN now() - (g % 1000) * interval '1 hour' END,
       CASE WHEN g % 50 = 0 THEN 'solicitud del socio' END
FROM generate_series(1, :total) AS g
"""
LEDGER_SQL = """
INSERT INTO movimientos (programa_id, fan_pk, puntos, motivo, nota)
SELECT programa_id, pk, puntos, 'ajuste', 'saldo inicial (bench)' FROM fans WHERE puntos <> 0
"""
# One transaction: +1 point to CHANGE_BATCH random fans of the program, with their ledger
# entries (a trigger-stamped change per fan).
CHANGE_SQL = """
WITH picked AS (
    SELECT DISTINCT :first + (random() * :span)::bigint AS pk
    FROM generate_series(1, :n)
), changed AS (
    UPDATE fans SET puntos = fans.puntos + 1 FROM picked
    WHERE fans.pk = picked.pk AND fans.programa_id = :program
    RETURNING fans.programa_id, fans.pk
)
INSERT INTO movimientos (programa_id, fan_pk, puntos, motivo, nota)
SELECT programa_id, pk, 1, 'ajuste', 'bench' FROM changed
RETURNING fan_pk
"""


@dataclass
class Loop:
    label: str
    fans: int
    distinct: int
    pages: int
    seconds: float
    page_ms: list[float]

    @property
    def rate(self) -> float:
        return self.fans / self.seconds if self.seconds else 0.0

    def line(self) -> str:
        p50 = statistics.median(self.page_ms)
        p90 = statistics.quantiles(self.page_ms, n=10)[-1] if len(self.page_ms) > 1 else p50
        return (
            f"{self.label:48} {self.fans:>9,} {self.pages:>6} {self.seconds:>8.1f} "
            f"{self.rate:>10,.0f} {p50:>8.1f} {p90:>8.1f}"
        )


def follow(
    label: str,
    fetch: Callable[[str | None], tuple[list[str], bool, str]],
    desde: str | None,
    max_pages: int,
) -> tuple[Loop, str]:
    """Call `fetch` from `desde` until hay_mas is false; time every page."""
    seen: set[str] = set()
    total = 0
    page_ms: list[float] = []
    began = time.perf_counter()
    for _ in range(max_pages):
        t0 = time.perf_counter()
        ids, hay_mas, desde = fetch(desde)
        page_ms.append((time.perf_counter() - t0) * 1000)
        total += len(ids)
        seen.update(ids)
        if not hay_mas:
            seconds = time.perf_counter() - began
            return Loop(label, total, len(seen), len(page_ms), seconds, page_ms), str(desde)
    raise SystemExit(f"{label}: more than {max_pages} pages")


def via_service(engine: Engine, limite: int) -> Callable[[str | None], tuple[list[str], bool, str]]:
    def fetch(desde: str | None) -> tuple[list[str], bool, str]:
        page = read_roster(engine, PROGRAM, desde, limite, settle_seconds=0)
        return [f.fan_id for f in page.fans], page.hay_mas, page.siguiente

    return fetch


def via_envoy(
    client: httpx.Client, key: str, limite: int
) -> Callable[[str | None], tuple[list[str], bool, str]]:
    def fetch(desde: str | None) -> tuple[list[str], bool, str]:
        params = {"limite": str(limite), **({"desde": desde} if desde else {})}
        response = client.get(
            "/api/v1/roster", params=params, headers={"Authorization": f"Bearer {key}"}
        )
        if response.status_code != 200:
            raise SystemExit(f"HTTP {response.status_code}: {response.text[:500]}")
        data = response.json()["data"]
        return [f["id"] for f in data["fans"]], data["hay_mas"], data["siguiente"]

    return fetch


def timed(label: str, action: Callable[[], T]) -> T:
    began = time.perf_counter()
    result = action()
    print(f"  {label}: {time.perf_counter() - began:.1f} s", flush=True)
    return result


def build(engine: Engine, fans: int) -> tuple[int, int]:
    """Both programs in one INSERT … SELECT generate_series; returns the program's first
    pk and the pk span."""
    total = fans + fans // 10
    # g % 11 == 0 goes to the other program: grow `total` until the program has `fans`.
    while total - total // 11 < fans:
        total += 1
    with engine.begin() as conn:
        timed(
            f"INSERT {total:,} fans (generate_series)",
            lambda: conn.execute(
                text(BUILD_SQL), {"program": PROGRAM, "other": OTHER, "total": total}
            ),
        )
        timed("ledger entries for the balances", lambda: conn.execute(text(LEDGER_SQL)))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        timed("VACUUM ANALYZE", lambda: conn.execute(text("VACUUM ANALYZE")))
        count, first, last = conn.execute(
            text("SELECT count(*), min(pk), max(pk) FROM fans WHERE programa_id = :p"),
            {"p": PROGRAM},
        ).one()
    if count != fans:
        raise SystemExit(f"built {count} fans, wanted {fans}")
    return int(first), int(last) - int(first)


def change(engine: Engine, first: int, span: int, changes: int) -> int:
    """`changes` point changes in transactions of CHANGE_BATCH fans; returns the number of
    distinct fans changed."""
    changed: set[int] = set()
    for _ in range(max(1, changes // CHANGE_BATCH)):
        with engine.begin() as conn:
            changed.update(
                conn.execute(
                    text(CHANGE_SQL),
                    {
                        "first": first,
                        "span": span,
                        "n": CHANGE_BATCH,
                        "program": PROGRAM,
                    },
                )
                .scalars()
                .all()
            )
    return len(changed)


def explain(
    engine: Engine, label: str, desde: tuple[int, int, int] | None, limite: int
) -> list[str]:
    """The plan of the page's fan query, as the page function runs it (auto_explain of its
    nested statements, with ANALYZE and BUFFERS, sent to this client at LOG level)."""
    logged: list[str] = []
    fase, xid, pk = desde if desde is not None else (None, None, None)
    with autocommit(engine) as conn:
        conn.add_notice_handler(lambda d: logged.append(d.message_primary or ""))
        for setting in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_nested_statements = on",
            "SET auto_explain.log_analyze = on",
            "SET auto_explain.log_buffers = on",
            "SET client_min_messages = log",
        ):
            conn.execute(setting)
        try:
            conn.execute(
                PAGE,
                {"programa": PROGRAM, "fase": fase, "xid": xid, "pk": pk, "limite": limite},
            ).fetchall()
        finally:
            conn.execute("RESET ALL")
    (page,) = [m for m in logged if "FROM fans f" in m and "ORDER BY f." in m]
    plan = page.splitlines()
    print(f"\n{label}:\n  " + "\n  ".join(plan))
    return plan[plan.index(next(line for line in plan if line.startswith("Query Text"))) + 1 :]


def check_plan(label: str, plan: list[str], *indexes: str) -> None:
    """One Index Scan on one of `indexes`, nothing else that reads or sorts rows."""
    body = "\n".join(plan)
    problems = [w for w in ("Seq Scan", "Sort", "Bitmap", "Offset") if w in body]
    scans = body.count("Index Scan")
    if scans != 1 or not any(f"Index Scan using {i} " in body for i in indexes) or problems:
        raise SystemExit(
            f"{label}: expected one Index Scan using {' or '.join(indexes)}, "
            f"got {scans} index scans and {problems}"
        )


@contextlib.contextmanager
def stack(work: Path, fans: int) -> Iterator[tuple[Engine, str, str, tuple[int, int]]]:
    key = "lp_vivo_" + secrets.token_hex(16)
    with contextlib.ExitStack() as cleanup:
        db = timed(
            "embedded PostgreSQL", lambda: start_embedded(work / "pgdata", delete_on_stop=True)
        )
        cleanup.callback(db.stop)
        upgrade(db.url)
        engine = make_engine(db.url, pool_size=4)
        cleanup.callback(engine.dispose)
        run_in_uow(
            engine,
            apply_fixture,
            json.dumps(
                {
                    "programas": [
                        {
                            "id": PROGRAM,
                            "nombre": "Club Bench",
                            "tasa_puntos": "0.1",
                            "claves": [
                                {"clave": key, "integracion": "CRM", "permisos": ["roster:leer"]}
                            ],
                        },
                        {"id": OTHER, "nombre": "Otro Club", "tasa_puntos": "0.1"},
                    ]
                }
            ),
        )
        span = build(engine, fans)
        server = cleanup.enter_context(bench_server(db.url))
        proxy = EnvoyProcess.start_spec(
            gateway_spec(
                http_port=_free_port(),
                upstreams=(f"127.0.0.1:{server.port}",),
                listen_host="127.0.0.1",
            ),
            work_dir=work / "envoy",
        )
        cleanup.callback(proxy.stop)
        yield engine, proxy.url, key, span


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(args: argparse.Namespace) -> int:
    began = time.monotonic()
    print(f"os.cpu_count() = {os.cpu_count()}; building {args.fans:,} fans ...", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="loyalty-bench-roster-") as tmp,
        stack(Path(tmp), args.fans) as (engine, url, key, (first, span)),
        httpx.Client(base_url=url, timeout=10) as client,
    ):
        with engine.connect() as conn:
            version = conn.execute(text("SHOW server_version")).scalar_one()
        print(f"PostgreSQL {version}; stack up in {time.monotonic() - began:.0f} s\n", flush=True)
        snap_envoy, end_envoy = follow(
            f"snapshot via Envoy (limite={args.limite})",
            via_envoy(client, key, args.limite),
            None,
            args.max_pages,
        )
        snap_service, end_service = follow(
            f"snapshot via the service (limite={args.limite})",
            via_service(engine, args.limite),
            None,
            args.max_pages,
        )
        for loop in (snap_envoy, snap_service):
            if (loop.fans, loop.distinct) != (args.fans, args.fans):
                raise SystemExit(f"{loop.label}: {loop.fans} fans, {loop.distinct} distinct")
        distinct = timed(
            f"{args.changes:,} changes in transactions of {CHANGE_BATCH:,}",
            lambda: change(engine, first, span, args.changes),
        )
        loops = [snap_envoy, snap_service]
        for limite in sorted({args.limite, 500}, reverse=True):
            loops.append(
                follow(
                    f"changes via Envoy (limite={limite})",
                    via_envoy(client, key, limite),
                    end_envoy,
                    args.max_pages,
                )[0]
            )
            loops.append(
                follow(
                    f"changes via the service (limite={limite})",
                    via_service(engine, limite),
                    end_service,
                    args.max_pages,
                )[0]
            )
        for loop in loops[2:]:
            if loop.distinct < distinct:
                raise SystemExit(f"{loop.label}: {loop.distinct} fans, {distinct} changed")

        # EXPLAIN a change page in the middle of the feed, with a real cursor.
        middle = read_roster(engine, PROGRAM, end_service, 500, settle_seconds=0)
        position = decode_cursor(PROGRAM, middle.siguiente).posicion
        assert position.fase is Fase.CAMBIOS
        plan = explain(
            engine,
            f"a change page (limite={args.limite}), after (xid {position.xid}, pk {position.pk})",
            (position.fase.value, position.xid, position.pk),
            args.limite,
        )
        check_plan("change page", plan, "ix_fans_programa_cambio_xid")
        # A snapshot page with a real cursor (the page function serves only those).
        second = decode_cursor(
            PROGRAM, read_roster(engine, PROGRAM, None, args.limite, settle_seconds=0).siguiente
        ).posicion
        assert second.fase is Fase.FOTO
        plan = explain(
            engine,
            f"a snapshot page (limite={args.limite}), the second",
            (second.fase.value, second.xid, second.pk),
            args.limite,
        )
        # One range scan of the primary key (programa_id, pk), no sort.
        check_plan("snapshot page", plan, "pk_fans")

    header = (
        f"{'':48} {'fans':>9} {'pages':>6} {'seconds':>8} {'fans/s':>10} "
        f"{'p50 ms':>8} {'p90 ms':>8}"
    )
    print(
        f"\nroster, {args.fans:,} fans (+{args.fans // 10:,} of another program "
        f"interleaved); {args.changes:,} changes on {distinct:,} distinct fans; "
        f"os.cpu_count() = {os.cpu_count()}"
    )
    print(header)
    print("-" * len(header))
    for loop in loops:
        print(loop.line())
    print(f"\ntotal run time {time.monotonic() - began:.0f} s (including the build)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--fans", type=int, default=1_000_000)
    parser.add_argument("--limite", type=int, default=2000)
    parser.add_argument("--changes", type=int, default=20_000)
    parser.add_argument("--max-pages", type=int, default=100_000)
    args = parser.parse_args(argv)
    if (
        not 1 <= args.fans <= 10_000_000
        or not 1 <= args.limite <= 2000
        or not 0 < args.changes <= 1_000_000
    ):
        parser.error("--fans in [1, 10M], --limite in [1, 2000], --changes in (0, 1M]")
    if hasattr(signal, "SIGALRM"):
        signal.alarm(OVERALL_SECONDS)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
