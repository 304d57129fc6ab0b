"""`loyalty status`: is it healthy, what runs, is the data consistent.

It checks the gRPC server's health (LOYALTY_GRPC_TARGET / `--target`), the gateway (the
work dir of `--work-dir`, else the one a `gateway run` with this data dir named, else
DATA_DIR/envoy; one that should answer and does not is UNHEALTHY), shows what the
`loyalty up`/`serve` supervising from the data dir runs and how often each kind of child
was restarted (runtime/process/process_file.py), prints the service,
Envoy and PostgreSQL versions, the Alembic revision applied against the package's head, the
wallet outbox backlog and the ledger consistency check. Its exit code is that of an LSB
`status` action: 0 healthy; 1 when anything that matters is wrong (server not SERVING,
database unreachable or behind, a balance that differs from its ledger, a supervising
process killed and its file left behind); 3 when nothing runs (no server listens at the
target, nothing supervises from the data dir or the work dir, no gateway answers there).
The outbox backlog is reported, never judged: it drains by itself.

The database is LOYALTY_DATABASE_URL or the embedded one in the data dir; when `loyalty up`
is running on that data dir its PostgreSQL is reused (and left running), else it is started
just for this and stopped again.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, text

from loyalty_grpc import __version__
from loyalty_grpc.runtime.console import command, say
from loyalty_grpc.runtime.postgres import Database, start_embedded
from loyalty_grpc.runtime.process.process_file import ago, summary
from loyalty_grpc.runtime.settings import GrpcTls, Settings

if TYPE_CHECKING:
    from loyalty_grpc.runtime.gateway.xds import WorkDir
    from loyalty_grpc.wallet.backlog import Backlog

ENVOY_TIMEOUT = 10.0

# The exit codes of an LSB init script's `status` action (1 also covers "dead, and its
# pid file left behind": a supervising process killed before it could clean up).
HEALTHY = 0
UNHEALTHY = 1
NOT_RUNNING = 3


@dataclass(frozen=True)
class Line:
    name: str
    value: str
    ok: bool = True


@dataclass(frozen=True)
class Part:
    """The lines of one part of the report, and whether what that part looks at is there:
    a listener at the target, a processes file (of a live or a killed process), a gateway
    (or a file saying one may still run). Nothing there in every part: not running."""

    lines: list[Line]
    present: bool


def grpc_health(target: str, tls: GrpcTls | None) -> Part:
    from loyalty_grpc.runtime.server_health import SERVING, health, nothing_listens

    answer = health(target, tls=tls)
    if answer == SERVING:
        return Part([Line("health", f"{answer} ({target})")], present=True)
    if nothing_listens(target):
        return Part([Line("health", f"{answer} ({target}: nothing listens)", ok=False)], False)
    return Part([Line("health", f"{answer} ({target})", ok=False)], present=True)


def process_lines(data_dir: Path, work_dir: Path) -> Part:
    """What the `loyalty up`/`serve` supervising from this data dir and the `gateway run`
    from that work dir run: how many processes, and their restarts
    (runtime/process/process_file.py)."""
    lines = []
    for folder in dict.fromkeys((data_dir, work_dir)):
        found = summary(folder)
        if found is not None:
            lines += [
                Line("processes", found.processes, ok=found.ok),
                Line("restarts", found.restarts),
            ]
    if lines:
        return Part(lines, present=True)
    return Part(
        [
            Line(
                "processes",
                f"no `{command('up')}`, `serve` or `gateway run` supervising from {data_dir}",
            )
        ],
        present=False,
    )


def gateway_lines(work_dir: Path, *, expected_by: str | None = None) -> Part:
    """The gateway running from `work_dir` (`up`: DATA_DIR/envoy), from its admin
    interface (the Unix socket of the work dir: as the gateway's user or root): state and
    uptime, listeners, the configuration versions applied, and the upstream servers as
    Envoy sees them. No gateway there is information, not a fault (a server-only host has
    none), unless one should be answering: a gateway started there and not stopped
    cleanly (its gateway.json is still there), or one that `expected_by` says was started
    (a data dir's registration, runtime/gateway/registered.py). The admin address file of
    an earlier version (admin on a TCP port) means its gateway may still run, unless
    nothing listens at that address any more."""
    from loyalty_grpc.runtime.gateway.admin import CLUSTERS, LISTENERS, address_text
    from loyalty_grpc.runtime.gateway.shape import (
        EnvoyError,
    )
    from loyalty_grpc.runtime.gateway.xds import WorkDir

    work = WorkDir(work_dir)
    admin = work.admin()
    try:
        info = admin.json("/server_info")
        listeners = admin.json("/listeners?format=json")
        hosts = admin.upstream_hosts()
        stats = admin.xds_stats()
    except PermissionError:
        return Part(
            [
                Line(
                    "gateway",
                    f"admin socket {admin}: permission denied (run status as the gateway's user)",
                    ok=False,
                )
            ],
            present=True,
        )
    except (FileNotFoundError, ConnectionRefusedError):
        return _no_gateway(work, expected_by)
    except (OSError, ValueError, EnvoyError) as exc:
        return Part([Line("gateway", f"admin {admin} does not answer ({exc})", ok=False)], True)
    state = str(info.get("state", "?"))
    return Part(
        [
            Line(
                "gateway",
                f"Envoy {state}, up {info.get('uptime_current_epoch', '?')}, "
                f"{_threads(info)} (admin {admin})",
                ok=state == "LIVE",
            ),
            Line(
                "listeners",
                ", ".join(
                    f"{listener.get('name')} {address_text(listener.get('local_address'))}"
                    for listener in listeners.get("listener_statuses", [])
                )
                or "none",
                ok=bool(listeners.get("listener_statuses")),
            ),
            Line(
                "gateway config",
                f"listeners {LISTENERS.version(stats) or '?'}, "
                f"clusters {CLUSTERS.version(stats) or '?'}",
            ),
            Line(
                "upstreams",
                ", ".join(f"{host.address} {host.health}" for host in hosts) or "none",
                ok=any(host.healthy for host in hosts),
            ),
        ],
        present=True,
    )


def _threads(info: dict[str, object]) -> str:
    """How many worker threads the running Envoy has (its `--concurrency`, from
    /server_info), as the banner says it."""
    from loyalty_grpc.runtime.gateway.envoy import threads_text

    options = info.get("command_line_options")
    threads = options.get("concurrency") if isinstance(options, dict) else None
    return threads_text(threads) if isinstance(threads, int) else "? worker threads"


def _no_gateway(work: WorkDir, expected_by: str | None) -> Part:
    """No Envoy answers on the work dir's admin socket."""
    from loyalty_grpc.runtime.server_health import nothing_listens

    if work.spec.is_file() or expected_by is not None:
        why = expected_by or f"started from {work.path} and not stopped cleanly"
        return Part(
            [
                Line(
                    "gateway",
                    f"missing: {why}, but no Envoy answers on {work.admin_socket} (its "
                    "`gateway run` or `up` was killed, or it is restarting Envoy: see "
                    "its log)",
                    ok=False,
                )
            ],
            present=True,
        )
    legacy = work.legacy_admin_address
    try:
        address = legacy.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return Part([Line("gateway", f"none running from {work.path}")], present=False)
    except OSError:
        address = ""
    try:
        stale = nothing_listens(address)
    except (ValueError, OverflowError):  # not HOST:PORT: who knows what wrote it
        stale = False
    if stale:
        return Part(
            [
                Line(
                    "gateway",
                    f"none running from {work.path} ({legacy.name} of an older version's "
                    f"stopped gateway left there: nothing listens at {address})",
                )
            ],
            present=False,
        )
    return Part(
        [
            Line(
                "gateway",
                f"started from {work.path} by an older version (admin on a TCP port): restart it",
                ok=False,
            )
        ],
        present=True,
    )


def envoy_version() -> Line:
    from loyalty_grpc.runtime.gateway.config import (
        envoy_binary,
    )
    from loyalty_grpc.runtime.gateway.shape import (
        EnvoyError,
    )

    try:
        done = subprocess.run(  # noqa: S603
            [str(envoy_binary()), "--version"],
            capture_output=True,
            text=True,
            timeout=ENVOY_TIMEOUT,
            check=True,
        )
    except (EnvoyError, OSError, subprocess.SubprocessError) as exc:
        return Line("envoy", f"unknown ({exc})")
    found = re.search(r"/(\d+\.\d+\.\d+)/", done.stdout)
    return Line("envoy", found.group(1) if found else done.stdout.strip())


def database_lines(engine: Engine, url: str) -> list[Line]:
    """PostgreSQL version, migrations, wallet outbox, ledger check."""
    from loyalty_grpc.store import migrate
    from loyalty_grpc.store.tables import LEDGER_MISMATCH_SQL
    from loyalty_grpc.wallet.backlog import backlog

    with engine.connect() as conn:
        version = conn.execute(text("SHOW server_version")).scalar_one()
    lines = [Line("postgresql", str(version))]
    schema = migrate.check(url)  # the rule `serve` starts by (docs/deployment.md "Upgrades")
    current, head = schema.applied, schema.head
    if not schema.usable:
        lines.append(
            Line(
                "migrations",
                f"{current or 'none'} applied, head is {head}: run `{command('migrate')}`",
                ok=False,
            )
        )
        return lines
    if schema.state is migrate.SchemaState.NEWER:
        lines.append(
            Line("migrations", f"{current} applied, newer than this version's head {head}")
        )
    elif schema.state is migrate.SchemaState.CONTRACT_PENDING:
        lines.append(
            Line(
                "migrations",
                f"{current} applied, head is {head}: contract pending "
                f"(`{command('migrate')} --contract` once every server runs this version)",
            )
        )
    else:
        lines.append(Line("migrations", f"{current} (head)"))
    with engine.connect() as conn:
        wallet = backlog(conn)
        mismatched = conn.execute(
            text(f"SELECT count(*) FROM ({LEDGER_MISMATCH_SQL}) AS m")  # noqa: S608
        ).scalar_one()
    lines.append(Line("wallet outbox", _backlog_text(wallet)))
    lines.append(
        Line(
            "ledger",
            f"{mismatched} fans whose balance differs from their ledger",
            ok=mismatched == 0,
        )
    )
    return lines


def _backlog_text(wallet: Backlog) -> str:
    """`12 fans pending (2 waiting for a retry), oldest 3 s ago`; beyond
    wallet.backlog.EXACT_UP_TO an estimate, e.g. `≈ 1200000 fans pending (estimate;
    10000+ waiting for a retry), oldest 14 min ago`."""
    from loyalty_grpc.wallet.backlog import EXACT_UP_TO

    if not wallet.fans:
        return "0 fans pending"
    if wallet.exact:
        counts = f"{wallet.fans} fans pending ({wallet.waiting}"
    else:
        capped = "+" if wallet.waiting >= EXACT_UP_TO else ""
        counts = f"≈ {wallet.fans} fans pending (estimate; {wallet.waiting}{capped}"
    return f"{counts} waiting for a retry), oldest {ago(wallet.oldest_seconds)} ago"


def _open(settings: Settings) -> Database | str:
    """The database, or why there is none."""
    if settings.database_url:
        return Database(url=settings.database_url, embedded=False)
    pgdata = settings.data_dir.resolve() / "pgdata"
    if not (pgdata / "PG_VERSION").exists():
        return f"none: no LOYALTY_DATABASE_URL and no embedded database in {pgdata}"
    return start_embedded(pgdata)


@dataclass(frozen=True)
class Report:
    """Every line, and whether anything runs (or was killed and left its file): see
    `Part`."""

    lines: list[Line]
    running: bool

    def verdict(self) -> tuple[str, int]:
        """The last line's word and the exit code."""
        if not self.running:
            return "not running", NOT_RUNNING
        if all(line.ok for line in self.lines):
            return "healthy", HEALTHY
        return "UNHEALTHY", UNHEALTHY


def _gateway_work_dir(data_dir: Path, work_dir: Path | None) -> tuple[Path, str | None]:
    """The gateway's work dir to check: `--work-dir`, else the one a `gateway run` with
    this data dir named (runtime/gateway/registered.py), else DATA_DIR/envoy (`up`'s);
    and, when a gateway with this data dir was started there and not stopped cleanly,
    what says so."""
    from loyalty_grpc.runtime.gateway.registered import registered, registration_path

    named = registered(data_dir)
    if named is None:
        return (work_dir if work_dir is not None else data_dir / "envoy"), None
    if work_dir is not None and work_dir.resolve() != named:
        return work_dir, None
    return named, f"a `gateway run` with data dir {data_dir} ({registration_path(data_dir)})"


def collect(settings: Settings, work_dir: Path | None = None) -> Report:
    """Every line; `work_dir` is the gateway's (default DATA_DIR/envoy, as `up` runs it).
    When nothing runs, no server at the target and no embedded database are what that
    means, not faults; the database is still checked when there is one."""
    from loyalty_grpc.store.db import make_engine

    work_dir, expected_by = _gateway_work_dir(settings.data_dir, work_dir)
    health = grpc_health(settings.server_target, settings.grpc_tls())
    parts = [
        health,
        process_lines(settings.data_dir, work_dir),
        gateway_lines(work_dir, expected_by=expected_by),
    ]
    running = any(part.present for part in parts)
    if not running:
        health = Part([replace(line, ok=True) for line in health.lines], present=False)
    lines = [
        *health.lines,
        *(line for part in parts[1:] for line in part.lines),
        Line("service", f"loyalty {__version__}"),
        envoy_version(),
    ]
    try:
        db = _open(settings)
    except Exception as exc:  # reported, not raised: this is a diagnosis
        failed = Line("postgresql", f"cannot start the embedded server: {exc}", ok=False)
        return Report([*lines, failed], running)
    if isinstance(db, str):
        return Report([*lines, Line("postgresql", db, ok=not running)], running)
    engine = make_engine(db.url, pool_size=1)
    try:
        lines += database_lines(engine, db.url)
    except Exception as exc:
        lines.append(Line("postgresql", f"error: {str(exc).splitlines()[0]}", ok=False))
    finally:
        engine.dispose()
        db.stop()
    return Report(lines, running)


def status_command(settings: Settings, work_dir: Path | None = None) -> int:
    report = collect(settings, work_dir)
    lines = report.lines
    width = max(len(line.name) for line in lines) + 2
    out = [
        f"{line.name + ':':{width}}{line.value}" + ("" if line.ok else "  << UNHEALTHY")
        for line in lines
    ]
    word, code = report.verdict()
    out.append(f"status: {word}")
    say("\n".join(out))
    return code
