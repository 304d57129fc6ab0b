"""The sale on a 3-node Citus cluster against the same sale on one node, for docs/citus.md
(a benchmark, not a test).

    .venv/bin/python bench/citus_sale.py [--seconds 10] [--threads 8] [--programs 4]
        [--fans 1000] [--rounds 2]

It builds Citus into the wheel's PostgreSQL if needed (../shared/vendor/build-citus.sh)
and starts the tests' cluster (tests/citus/cluster.py: a coordinator and two workers on
loopback, fsync and synchronous commits off on every node). Two databases on it:
- `one_node`: on the coordinator's server, without the citus extension: plain PostgreSQL
  with the same settings, the same server;
- `cluster`: the citus extension on the three nodes, distributed by `loyalty migrate`.
Each is migrated and loaded with `--programs` programs of `--fans` fans (one key each,
the back office's fixture), then, alternating between the two for `--rounds` rounds,
`--threads` threads run the service's own sale (services/pos/sales.register_sale: the
folio block, the statement, the duplicate's replay) for `--seconds` each: new sales of
random fans of random programs. It prints sales/s, p50 and p99 per round, the ledger
audit of both databases and os.cpu_count().

On one machine the cluster is not expected to be faster: three servers share its cores
and each call takes one more hop (the coordinator to the worker). What Citus buys is room
on several machines; this measures what the hop and the routing cost a sale.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import secrets
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from sqlalchemy import Engine, select

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.fan_ref import parse_fan_ref
from loyalty_grpc.domain.keys import Modo
from loyalty_grpc.domain.permissions import Permiso
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.services.pos.sales import NewSale, register_sale
from loyalty_grpc.store import migrate
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.folios import Folios
from loyalty_grpc.store.tables import LEDGER_MISMATCH_SQL, claves
from tests.citus.cluster import build_citus, running_cluster, why_no_citus

TASA = Decimal("0.1")


def fixture(programs: int, fans: int) -> str:
    return json.dumps(
        {
            "programas": [
                {
                    "id": f"p{p}",
                    "nombre": f"Club {p}",
                    "tasa_puntos": str(TASA),
                    "claves": [
                        {
                            "clave": "lp_vivo_" + secrets.token_hex(16),
                            "integracion": "Caja",
                            "permisos": ["tx:escribir"],
                        }
                    ],
                    "fans": [
                        {
                            "id": f"F{p}X{i}",
                            "nombre": f"Fan {i}",
                            "correo": f"f{i}@p{p}.example.com",
                            "socio_desde": 2020,
                            "qr_token": f"q{p}x{i}",
                        }
                        for i in range(fans)
                    ],
                }
                for p in range(programs)
            ]
        }
    )


def callers(engine: Engine) -> list[Caller]:
    with engine.connect() as conn:
        rows = conn.execute(select(claves.c.id, claves.c.programa_id)).all()
    return [
        Caller(
            programa_id=programa,
            programa_nombre=programa,
            clave_id=int(clave_id),
            tasa_puntos=TASA,
            moneda="MXN",
            integracion="Caja",
            modo=Modo.VIVO,
            permisos=frozenset({Permiso.TX_ESCRIBIR}),
        )
        for clave_id, programa in rows
    ]


class Target:
    """One database under test: its engine, folios and callers."""

    def __init__(self, name: str, url: str, programs: int, fans: int, threads: int) -> None:
        self.name = name
        assert migrate.upgrade(url) == migrate.head()
        self.engine = make_engine(url, pool_size=threads + 2)
        from loyalty_grpc.store.uow import run_in_uow

        run_in_uow(self.engine, apply_fixture, fixture(programs, fans))
        self.folios = Folios(self.engine)
        self.callers = callers(self.engine)
        self.fans = fans
        self._ids = itertools.count()

    def run(self, seconds: float, threads: int) -> list[float]:
        """Sales for `seconds` from `threads` threads: each one's latency in seconds."""
        latencies: list[list[float]] = [[] for _ in range(threads)]
        deadline = time.perf_counter() + seconds

        def worker(mine: list[float]) -> None:
            rng = random.Random()
            while time.perf_counter() < deadline:
                caller = rng.choice(self.callers)
                p = caller.programa_id.removeprefix("p")
                sale = NewSale(
                    id_externo=f"b-{next(self._ids)}",
                    fan=parse_fan_ref(f"F{p}X{rng.randrange(self.fans)}"),
                    centavos=10_000,
                    moneda="MXN",
                    ts=datetime.now(UTC),
                )
                start = time.perf_counter()
                register_sale(self.engine, self.folios, caller, sale)
                mine.append(time.perf_counter() - start)

        pool = [threading.Thread(target=worker, args=(mine,)) for mine in latencies]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        return [x for mine in latencies for x in mine]

    def audit(self) -> int:
        from sqlalchemy import text

        with self.engine.connect() as conn:
            return len(conn.execute(text(LEDGER_MISMATCH_SQL)).all())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--programs", type=int, default=4)
    parser.add_argument("--fans", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    reason = why_no_citus()
    if reason is not None:
        sys.exit(f"cannot build Citus: {reason}")
    print(build_citus())
    with tempfile.TemporaryDirectory(prefix="bench-citus-") as work:
        Path(work).chmod(0o755)
        with running_cluster(Path(work)) as cluster:
            targets = [
                Target(
                    "one node",
                    cluster.create_single_node_database("one_node"),
                    args.programs,
                    args.fans,
                    args.threads,
                ),
                Target(
                    "cluster",
                    cluster.create_database("cluster"),
                    args.programs,
                    args.fans,
                    args.threads,
                ),
            ]
            for target in targets:
                target.run(2.0, args.threads)  # warm-up: connections, plans, caches
            for round_ in range(1, args.rounds + 1):
                for target in targets:
                    latencies = sorted(target.run(args.seconds, args.threads))
                    p99 = latencies[int(len(latencies) * 0.99)]
                    print(
                        f"round {round_} {target.name:>8}: {len(latencies) / args.seconds:7.0f} "
                        f"sales/s, p50 {statistics.median(latencies) * 1000:6.2f} ms, "
                        f"p99 {p99 * 1000:6.2f} ms"
                    )
            for target in targets:
                print(f"ledger audit, {target.name}: {target.audit()} mismatched fans")
                target.engine.dispose()
    print(
        f"os.cpu_count() = {os.cpu_count()}; the client threads and the three PostgreSQL "
        f"servers share these cores; {args.threads} threads, {args.programs} programs of "
        f"{args.fans} fans"
    )


if __name__ == "__main__":
    main()
