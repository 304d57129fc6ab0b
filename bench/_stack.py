"""What bench/promos.py and bench/codes.py share: a fresh stack on loopback (embedded
PostgreSQL, migrations, a fixture, the gRPC server, Envoy in front), set-based bulk loading
of codes, and timing helpers. Not a benchmark by itself."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

PROGRAM = "bench"
FAN = "BENCH01"
STARTUP_TIMEOUT = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fixture_json(key: str, promos: list[str]) -> str:
    return json.dumps(
        {
            "programas": [
                {
                    "id": PROGRAM,
                    "nombre": "Club Bench",
                    "tasa_puntos": "0.1",
                    "qr_url": "https://bench.example/fan",
                    "claves": [
                        {
                            "clave": key,
                            "integracion": "Back office Bench",
                            "permisos": ["codigos:escribir"],
                        }
                    ],
                    "fans": [
                        {
                            "id": FAN,
                            "nombre": "Bench",
                            "correo": "bench@example.com",
                            "socio_desde": 2020,
                            "qr_token": "qrbench",
                        }
                    ],
                    "promos": [{"nombre": n, "vigencia_fin": "2099-12-31"} for n in promos],
                }
            ]
        }
    )


@dataclass
class Stack:
    key: str
    http_url: str
    # The benchmark's own engine (bulk loading, the query alone); the server has its own.
    engine: Engine

    def promo_id(self, nombre: str) -> int:
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    text("SELECT id FROM promos WHERE programa_id = :p AND nombre = :n"),
                    {"p": PROGRAM, "n": nombre},
                ).scalar_one()
            )


@contextlib.contextmanager
def bench_server(database_url: str) -> Iterator[Any]:
    """The gRPC server in this process, on a free loopback port (`.port`), with its default
    settings but the per-key limit, which runs but never refuses: a benchmark measures the
    path, and a run can make more than the default 600 calls a minute with its one key."""
    from loyalty_grpc.api.server import ServerSettings, build_server

    server = build_server(
        ServerSettings(
            database_url=database_url,
            admin_token=secrets.token_urlsafe(24),
            port=0,
            rate_limit_per_minute=1_000_000,
        )
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def running_stack(work: Path, promos: list[str]) -> Iterator[Stack]:
    """Fresh embedded PostgreSQL (migrated, one program with a codigos:escribir key, one fan,
    `promos`), the gRPC server with its default settings, Envoy (`--concurrency 1`, as
    `loyalty up` runs it) in front; all on loopback, all stopped on exit."""
    from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
    from loyalty_grpc.runtime.postgres import start_embedded
    from loyalty_grpc.services.backoffice.fixtures import apply_fixture
    from loyalty_grpc.store.db import make_engine
    from loyalty_grpc.store.migrate import upgrade
    from loyalty_grpc.store.uow import run_in_uow

    key = "lp_vivo_" + secrets.token_hex(16)
    with contextlib.ExitStack() as cleanup:
        db = start_embedded(work / "pgdata", delete_on_stop=True)
        cleanup.callback(db.stop)
        upgrade(db.url)
        engine = make_engine(db.url, pool_size=2)
        cleanup.callback(engine.dispose)
        run_in_uow(engine, apply_fixture, fixture_json(key, promos))
        server = cleanup.enter_context(bench_server(db.url))
        proxy = EnvoyProcess.start_spec(
            gateway_spec(
                http_port=free_port(),
                upstreams=(f"127.0.0.1:{server.port}",),
                listen_host="127.0.0.1",
            ),
            work_dir=work / "envoy",
            startup_timeout=STARTUP_TIMEOUT,
        )
        cleanup.callback(proxy.stop)
        yield Stack(key=key, http_url=proxy.url, engine=engine)


# Share of a bulk-loaded promotion's codes in each state (out of 10).
STATE_MIX_SQL = """CASE WHEN g % 10 < 6 THEN 'disponible' WHEN g % 10 < 8 THEN 'asignado'
                        WHEN g % 10 < 9 THEN 'canjeado' ELSE 'liberado' END"""


def bulk_codes(engine: Engine, promo_id: int, count: int, *, prefix: str, mixed: bool) -> float:
    """Insert `count` codes into the promotion in one set-based statement
    (generate_series); `mixed`: 60 % disponible, 20 % asignado, 10 % canjeado, 10 %
    liberado (delivered ones to the bench fan), else all disponible. Returns seconds."""
    estado = STATE_MIX_SQL if mixed else "'disponible'"
    started = time.monotonic()
    with engine.begin() as conn:
        # Bench set-up only: skip the per-row foreign-key triggers (the rows are consistent
        # by construction); the embedded PostgreSQL runs as a superuser, which this needs.
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(
            text(f"""
            INSERT INTO codigos (promo_id, programa_id, codigo, estado, fan_pk)
            SELECT :promo, :programa, :prefix || lpad(g::text, 8, '0'), e.estado,
                   CASE WHEN e.estado IN ('asignado', 'canjeado') THEN f.pk END
            FROM generate_series(1, :n) AS g
            CROSS JOIN LATERAL (SELECT {estado} AS estado) AS e
            CROSS JOIN (SELECT pk FROM fans WHERE programa_id = :programa
                        AND fan_id = :fan) AS f
        """),
            {"promo": promo_id, "programa": PROGRAM, "prefix": prefix, "n": count, "fan": FAN},
        )
    return time.monotonic() - started


def vacuum_analyze(engine: Engine) -> float:
    """VACUUM ANALYZE codigos (what autovacuum does soon after a bulk load: sets the
    visibility map, so counts are index-only scans), then a CHECKPOINT. Returns seconds."""
    started = time.monotonic()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE codigos"))
    checkpoint(engine)
    return time.monotonic() - started


def checkpoint(engine: Engine) -> None:
    """Write out the bulk load's dirty pages now, so that the background writer does not
    compete with the measurements that follow."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("CHECKPOINT"))


@dataclass
class Timing:
    label: str
    seconds: list[float]

    def row(self) -> str:
        ms = sorted(s * 1000 for s in self.seconds)
        return (
            f"{self.label:58} {len(ms):4d} {ms[0]:9.1f} {statistics.median(ms):9.1f} {ms[-1]:9.1f}"
        )


HEADER = f"{'':58} {'runs':>4} {'min ms':>9} {'median ms':>9} {'max ms':>9}"


def timed(label: str, runs: int, call: Callable[[], object], *, deadline: float) -> Timing:
    """`call` `runs` times (fewer if `deadline`, a time.monotonic() value, passes)."""
    seconds: list[float] = []
    for _ in range(runs):
        started = time.monotonic()
        call()
        seconds.append(time.monotonic() - started)
        if time.monotonic() > deadline:
            break
    return Timing(label, seconds)


def interleaved(
    calls: dict[str, Callable[[], object]], runs: int, *, deadline: float
) -> list[Timing]:
    """Each of `calls` `runs` times, round-robin (one of each, then again), so that a
    background transient (autovacuum, a checkpoint) weighs on every row alike; fewer runs
    if `deadline` passes."""
    timings = {label: Timing(label, []) for label in calls}
    for _ in range(runs):
        for label, call in calls.items():
            started = time.monotonic()
            call()
            timings[label].seconds.append(time.monotonic() - started)
        if time.monotonic() > deadline:
            break
    return list(timings.values())


def cores_line() -> str:
    return (
        f"os.cpu_count() = {os.cpu_count()}; client, Envoy, server and PostgreSQL share "
        "these cores."
    )
