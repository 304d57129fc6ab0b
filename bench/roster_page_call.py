"""A roster page as one call (issue 27) against the page as it was read before, on plain
PostgreSQL, for docs/roster.md (a benchmark, not a test).

    .venv/bin/python bench/roster_page_call.py [--fans 200000] [--rounds 2]

A fresh embedded PostgreSQL, migrated, with bench/roster.py's two interleaved programs
(`--fans` + `--fans / 10`), 20,000 balance changes, and cursors recorded for the pages
read. Then each kind of page is read both ways, in random order per call, so that the
machine's load hits both alike:

- before: a REPEATABLE READ READ ONLY transaction, the page's state (`FEED_STATE`, the
  text store/roster_cursors.py had from issue 24 to 27), then the page's query (what
  store/roster.py built with SQLAlchemy then: `BEFORE_SNAPSHOT` / `BEFORE_CHANGES`,
  compiled per call as it was), rows turned into entries;
- after: store.roster.read_page, one `SELECT * FROM loyalty_roster_page(…)` in autocommit.

Both must answer the same fans, the same `hay_mas` and the same last position, or it
stops. Medians and p90 in milliseconds, per kind of page.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from roster import OTHER, PROGRAM, build, change
from sqlalchemy import Engine, select, text, tuple_

from loyalty_grpc.domain.promos import EstadoFan
from loyalty_grpc.runtime.postgres import start_embedded
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.store import roster as roster_store
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.migrate import upgrade
from loyalty_grpc.store.tables import fans
from loyalty_grpc.store.uow import run_in_uow

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
_COLUMNS = (
    fans.c.pk,
    fans.c.cambio_xid,
    fans.c.fan_id,
    fans.c.nombre,
    fans.c.correo,
    fans.c.socio_desde,
    fans.c.puntos,
    fans.c.estado,
    fans.c.baja_en,
    fans.c.baja_motivo,
    fans.c.actualizado,
)
_ESTADOS = {e.value: e for e in EstadoFan}
# (ids, hay_mas, last position, emitido): what both ways must agree on.
Answer = tuple[list[str], bool, tuple[int, int] | None, bool]


def before(engine: Engine, desde: tuple[int, int, int], limite: int) -> Answer:
    fase, xid, pk = desde
    conn = engine.connect().execution_options(
        isolation_level="REPEATABLE READ", postgresql_readonly=True
    )
    with conn, conn.begin():
        state = conn.execute(
            FEED_STATE, {"programa": PROGRAM, "fase": fase, "xid": xid, "pk": pk}
        ).one()
        query = select(*_COLUMNS).where(fans.c.programa_id == PROGRAM)
        if fase == 1:
            query = query.where(fans.c.pk > pk).order_by(fans.c.pk)
        else:
            query = query.where(
                tuple_(fans.c.cambio_xid, fans.c.pk) > tuple_(xid, pk),
                fans.c.cambio_xid < state.horizon,
            ).order_by(fans.c.cambio_xid, fans.c.pk)
        rows = conn.execute(query.limit(limite + 1)).all()
    served = rows[:limite]
    entries = [
        roster_store.RosterEntry(a, b, c, d, e, _ESTADOS[f], g, h, i)
        for _pk, _xid, a, b, c, d, e, f, g, h, i in served
    ]
    last = (served[-1].cambio_xid, served[-1].pk) if served else None
    return [e.fan_id for e in entries], len(rows) > limite, last, state.emitido


def after(engine: Engine, desde: tuple[int, int, int], limite: int) -> Answer:
    state, page = roster_store.read_page(engine, PROGRAM, desde, limite)
    return [e.fan_id for e in page.fans], page.hay_mas, page.last, state.emitido


def record(engine: Engine, cursors: list[tuple[int, int, int]]) -> None:
    with engine.begin() as conn:
        sistema = conn.execute(text("SELECT system_identifier FROM pg_control_system()")).scalar()
        for fase, xid, pk in cursors:
            conn.execute(
                text(
                    "INSERT INTO roster_cursores (programa_id, sistema, fase, xid, pk) "
                    "VALUES (:p, :s, :f, :x, :k) ON CONFLICT DO NOTHING"
                ),
                {"p": PROGRAM, "s": sistema, "f": fase, "x": xid, "k": pk},
            )


def one_row(engine: Engine, sql: str) -> tuple[int, ...]:
    with engine.connect() as conn:
        return tuple(int(v) for v in conn.execute(text(sql), {"p": PROGRAM}).one())


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="loyalty-bench-page-") as tmp:
        db = start_embedded(Path(tmp) / "pgdata", delete_on_stop=True)
        try:
            upgrade(db.url)
            engine = make_engine(db.url, pool_size=4)
            programs = [
                {"id": PROGRAM, "nombre": "Club Bench", "tasa_puntos": "0.1"},
                {"id": OTHER, "nombre": "Otro Club", "tasa_puntos": "0.1"},
            ]
            run_in_uow(engine, apply_fixture, json.dumps({"programas": programs}))
            first, span = build(engine, args.fans)
            (watermark,) = one_row(
                engine, "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
            )
            change(engine, first, span, 20_000)
            tip = one_row(
                engine,
                "SELECT cambio_xid, pk FROM fans WHERE programa_id = :p "
                "ORDER BY cambio_xid DESC, pk DESC LIMIT 1",
            )
            pks = [first + random.randrange(max(1, span - 5_000)) for _ in range(50)]
            snapshot = [(1, watermark, pk) for pk in pks]
            changes = (2, watermark, 0)
            quiet = (2, tip[0], tip[1])
            record(engine, [*snapshot, changes, quiet])
            kinds: dict[str, list[tuple[tuple[int, int, int], int]]] = {
                "snapshot page, limite 2000": [(c, 2000) for c in snapshot],
                "snapshot page, limite 500": [(c, 500) for c in snapshot],
                "change page, limite 2000": [(changes, 2000)] * 50,
                "change page, limite 500": [(changes, 500)] * 50,
                "quiet poll (end of the feed)": [(quiet, 500)] * 50,
            }
            print(f"{args.fans:,} fans (+{args.fans // 10:,} of another program); ms per page")
            for label, calls in kinds.items():
                times: dict[str, list[float]] = {"before": [], "after": []}
                ways: dict[str, Callable[[Engine, tuple[int, int, int], int], Answer]] = {
                    "before": before,
                    "after": after,
                }
                for _ in range(args.rounds):
                    for desde, limite in calls:
                        answers = {}
                        for way in random.sample(sorted(ways), 2):
                            began = time.perf_counter()
                            answers[way] = ways[way](engine, desde, limite)
                            times[way].append((time.perf_counter() - began) * 1000)
                        if answers["before"] != answers["after"] or not answers["after"][3]:
                            raise SystemExit(f"{label}: the two ways disagree at {desde}")
                line = "   ".join(
                    f"{way}: p50 {statistics.median(t):6.2f}  "
                    f"p90 {statistics.quantiles(t, n=10)[-1]:6.2f}"
                    for way, t in times.items()
                )
                print(f"{label:30} n={len(times['after']):4}  {line}", flush=True)
            engine.dispose()
        finally:
            db.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--fans", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
