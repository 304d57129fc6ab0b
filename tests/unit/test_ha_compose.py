"""deploy/ha/ (PostgreSQL high availability with Patroni and etcd) hangs together, no Docker
needed: the compose file's services, pinned images, healthchecks, start order and volumes;
the service's URL naming every Patroni node; etcd and Patroni agreeing on each other's
addresses; secrets only as `${NAME:?…}` references, each to the services that need it; the
service's own services the same as docker-compose.yml's; and patroni.yml's settings for
"nothing acknowledged is lost". The file's validity under both Compose schemas:
tests/integration/test_compose_schema.py; patroni.yml under Patroni's own validator:
tests/integration/test_patroni_config.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from loyalty_grpc.store.db import parse_url
from tests.compose_files import REFERENCE, env_file_keys, interpolate

ROOT = Path(__file__).resolve().parents[2]
HA = ROOT / "deploy" / "ha"
ETCD = ("etcd1", "etcd2", "etcd3")
PASSWORD_FILE = "/run/secrets/database_password"  # the compose secret database_password
NODES = ("pg1", "pg2", "pg3")
APP = ("migrate", "server", "envoy")
SECRETS = (
    "LOYALTY_ADMIN_TOKEN",
    "PATRONI_SUPERUSER_PASSWORD",
    "PATRONI_REPLICATION_PASSWORD",
    "PATRONI_RESTAPI_PASSWORD",
)


def load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    found: dict[str, Any] = load(HA / "docker-compose.yml")["services"]
    return found


@pytest.fixture(scope="module")
def patroni() -> dict[str, Any]:
    return load(HA / "patroni.yml")


def example() -> dict[str, str]:
    """What an operator's .env holds: loyalty.env.example and deploy/ha/ha.env.example."""
    return env_file_keys(ROOT / "loyalty.env.example") | env_file_keys(HA / "ha.env.example")


def environment(service: dict[str, Any]) -> dict[str, str]:
    assert "env_file" not in service  # a whole file would hand every secret to everyone
    values: dict[str, str] = service.get("environment", {})
    return {name: str(value) for name, value in values.items()}


def port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_services(services: dict[str, Any]) -> None:
    assert set(services) == {*ETCD, *NODES, *APP}


def test_images_are_pinned(services: dict[str, Any]) -> None:
    """Pulled images name an exact version; built ones are built from this checkout."""
    for name in ETCD:
        assert re.fullmatch(r"quay\.io/coreos/etcd:v\d+\.\d+\.\d+", services[name]["image"])
    dockerfile = (HA / "Dockerfile").read_text()
    (base,) = re.findall(r"^FROM (\S+)$", dockerfile, re.MULTILINE)
    main = load(ROOT / "docker-compose.yml")["services"]
    assert base == main["postgres"]["image"]  # the same PostgreSQL as the single-server file
    for name in NODES:
        build = services[name]["build"]
        assert (HA / build["context"] / build["dockerfile"]).resolve() == HA / "Dockerfile"


def test_the_patroni_image_has_the_version_the_tests_run(services: dict[str, Any]) -> None:
    """deploy/ha/Dockerfile installs the Patroni that pyproject.toml pins (the one
    tests/integration/test_patroni_config.py and the failover test run), and the image's
    tag says so."""
    (pinned,) = re.findall(r'"patroni\[[^\]]*\]==([\d.]+)"', (ROOT / "pyproject.toml").read_text())
    dockerfile = (HA / "Dockerfile").read_text()
    assert f"ARG PATRONI_VERSION={pinned}\n" in dockerfile
    assert '"patroni[etcd3,psycopg3]==${PATRONI_VERSION}"' in dockerfile
    for name in NODES:
        assert services[name]["image"].startswith(f"loyalty-patroni:{pinned}-")


def test_the_image_carries_what_patroni_yml_names(patroni: dict[str, Any]) -> None:
    dockerfile = (HA / "Dockerfile").read_text()
    assert "COPY patroni.yml /etc/patroni/patroni.yml\n" in dockerfile
    assert patroni["bootstrap"]["post_bootstrap"] == "/etc/patroni/post_bootstrap.sh"
    assert "COPY post_bootstrap.sh /etc/patroni/post_bootstrap.sh\n" in dockerfile
    assert (HA / "post_bootstrap.sh").stat().st_mode & 0o111  # Patroni executes it
    assert 'ENTRYPOINT ["patroni", "/etc/patroni/patroni.yml"]' in dockerfile
    assert "USER postgres" in dockerfile  # PostgreSQL refuses root
    major = re.findall(r"^FROM postgres:(\d+)$", dockerfile, re.MULTILINE)
    assert patroni["postgresql"]["bin_dir"] == f"/usr/lib/postgresql/{major[0]}/bin"


def test_healthchecks(services: dict[str, Any]) -> None:
    for name in (*ETCD, *NODES, "server", "envoy"):
        assert services[name]["healthcheck"]["test"], name
    for name in ETCD:
        assert services[name]["healthcheck"]["test"] == ["CMD", "etcdctl", "endpoint", "health"]
    for name in NODES:
        test = services[name]["healthcheck"]["test"]
        assert test[:3] == ["CMD", "python3", "-c"]
        compile(test[3], f"{name} healthcheck", "exec")
        assert "127.0.0.1:8008/health" in test[3]


def test_start_order(services: dict[str, Any]) -> None:
    healthy = {"condition": "service_healthy"}
    for name in ETCD:
        assert "depends_on" not in services[name]
    for name in NODES:
        assert services[name]["depends_on"] == dict.fromkeys(ETCD, healthy)
    assert services["migrate"]["depends_on"] == dict.fromkeys(NODES, healthy)
    assert services["server"]["depends_on"] == {
        "migrate": {"condition": "service_completed_successfully"}
    }
    assert services["envoy"]["depends_on"] == {"server": healthy}


def test_every_member_and_node_keeps_its_data_in_a_named_volume(
    services: dict[str, Any], patroni: dict[str, Any]
) -> None:
    volumes = load(HA / "docker-compose.yml")["volumes"]
    for name in ETCD:
        (mount,) = services[name]["volumes"]
        assert mount == f"{name}:{environment(services[name])['ETCD_DATA_DIR']}"
    for name in NODES:
        (mount,) = services[name]["volumes"]
        volume, target = mount.split(":")
        assert volume == name
        assert patroni["postgresql"]["data_dir"].startswith(f"{target}/")
    assert volumes == {name: {"name": f"loyalty_ha_{name}"} for name in (*ETCD, *NODES)}


def test_the_etcd_members_form_one_cluster(services: dict[str, Any]) -> None:
    peers = ",".join(f"{name}=http://{name}:2380" for name in ETCD)
    for name in ETCD:
        env = environment(services[name])
        assert env["ETCD_NAME"] == name
        assert env["ETCD_INITIAL_CLUSTER"] == peers
        assert env["ETCD_INITIAL_ADVERTISE_PEER_URLS"] == f"http://{name}:2380"
        assert env["ETCD_ADVERTISE_CLIENT_URLS"] == f"http://{name}:2379"
        assert port(env["ETCD_LISTEN_CLIENT_URLS"]) == 2379


def test_each_node_names_itself_and_every_etcd_member(
    services: dict[str, Any], patroni: dict[str, Any]
) -> None:
    """Patroni's node-specific settings come from the service's environment, with the ports
    patroni.yml listens on; PATRONI_NAME is the application_name Patroni puts in
    synchronous_standby_names, so it must be unique."""
    api_port = port(patroni["restapi"]["listen"])
    pg_port = port(patroni["postgresql"]["listen"])
    for name in NODES:
        env = environment(services[name])
        assert env["PATRONI_NAME"] == name
        assert env["PATRONI_RESTAPI_CONNECT_ADDRESS"] == f"{name}:{api_port}"
        assert env["PATRONI_POSTGRESQL_CONNECT_ADDRESS"] == f"{name}:{pg_port}"
        assert env["PATRONI_ETCD3_HOSTS"] == ",".join(f"{member}:2379" for member in ETCD)


def test_the_service_url_names_every_node_and_wants_the_writable_one(
    services: dict[str, Any], patroni: dict[str, Any]
) -> None:
    pg_port = port(patroni["postgresql"]["listen"])
    for name in ("migrate", "server"):
        url = parse_url(interpolate(environment(services[name])["LOYALTY_DATABASE_URL"], example()))
        assert url.query["host"] == tuple(f"{node}:{pg_port}" for node in NODES)
        assert url.query["target_session_attrs"] == "read-write"
        assert (url.username, url.password) == ("loyalty", None)  # the secret's file has it
        assert environment(services[name])["LOYALTY_DATABASE_PASSWORD_FILE"] == PASSWORD_FILE
        assert services[name]["secrets"] == ["database_password"]
        assert url.database == "loyalty"  # what post_bootstrap.sh creates
    # The nodes give the role the same secret's password.
    for name in NODES:
        assert environment(services[name])["LOYALTY_DB_PASSWORD_FILE"] == PASSWORD_FILE
        assert services[name]["secrets"] == ["database_password"]
    main = load(ROOT / "docker-compose.yml")
    assert load(HA / "docker-compose.yml")["secrets"]["database_password"]["file"] == (
        "../../secrets/database_password"
    )
    assert main["secrets"]["database_password"]["file"] == "./secrets/database_password"
    post_bootstrap = (HA / "post_bootstrap.sh").read_text()
    assert 'LOYALTY_DB_PASSWORD=$(cat "$LOYALTY_DB_PASSWORD_FILE")' in post_bootstrap
    assert "CREATE ROLE loyalty LOGIN PASSWORD :'password';" in post_bootstrap
    assert "CREATE DATABASE loyalty OWNER loyalty;" in post_bootstrap


def test_secrets_are_references_each_to_the_services_that_need_it(
    services: dict[str, Any],
) -> None:
    text = (HA / "docker-compose.yml").read_text()
    required = {name for name, operator, _ in REFERENCE.findall(text) if operator.endswith("?")}
    assert required == set(SECRETS)
    assert required <= set(example())
    assert set(env_file_keys(HA / "ha.env.example")) <= required
    for service in services.values():
        for variable, value in environment(service).items():
            if variable.endswith("_PASSWORD") or variable == "LOYALTY_ADMIN_TOKEN":
                reference = REFERENCE.fullmatch(value)
                assert reference is not None, variable
                assert reference[2] == ":?", variable  # no default: unset stops Compose
    seen = {
        name: {secret for secret in SECRETS if f"${{{secret}" in str(environment(service))}
        for name, service in services.items()
    }
    node_secrets = set(SECRETS) - {"LOYALTY_ADMIN_TOKEN"}
    assert seen == {
        **{name: set() for name in ETCD},
        **dict.fromkeys(NODES, node_secrets),
        "migrate": set(),
        "server": {"LOYALTY_ADMIN_TOKEN"},
        "envoy": set(),
    }
    missing = r"set PATRONI_SUPERUSER_PASSWORD in \.env \(deploy/ha/ha\.env\.example\)"
    with pytest.raises(AssertionError, match=missing):
        interpolate(text, env_file_keys(ROOT / "loyalty.env.example"))


def test_the_service_is_docker_compose_yml_s(services: dict[str, Any]) -> None:
    """migrate, server and envoy are the single-server file's, but for the database URL,
    migrate's start order and the paths (relative to deploy/ha/)."""
    main = load(ROOT / "docker-compose.yml")["services"]
    for name in APP:
        ours, theirs = dict(services[name]), dict(main[name])
        for service in (ours, theirs):
            service["environment"] = {
                k: v for k, v in environment(service).items() if k != "LOYALTY_DATABASE_URL"
            }
            service["build"] = service["build"]["dockerfile"]
        assert (HA / services[name]["build"]["context"]).resolve() == ROOT
        if name == "migrate":
            del ours["depends_on"], theirs["depends_on"]
        if name == "envoy":
            assert ours.pop("volumes") == ["${LOYALTY_TLS_DIR:-../../certs}:/certs:ro"]
            assert theirs.pop("volumes") == ["${LOYALTY_TLS_DIR:-./certs}:/certs:ro"]
        assert ours == theirs, name


def test_patroni_yml_loses_nothing_acknowledged(patroni: dict[str, Any]) -> None:
    """What docs/deployment.md (High availability) asks of every node that may become the
    primary, as Patroni writes it."""
    dcs = patroni["bootstrap"]["dcs"]
    assert dcs["synchronous_mode"] is True
    assert dcs["synchronous_mode_strict"] is True
    assert dcs["synchronous_node_count"] == 1
    assert dcs["postgresql"]["parameters"]["synchronous_commit"] == "on"  # a string, not True
    assert dcs["ttl"] >= dcs["loop_wait"] + 2 * dcs["retry_timeout"]
    for line in patroni["postgresql"]["pg_hba"]:
        assert line.split()[-1] == "scram-sha-256", line  # nothing trusted
    for secret in ("password", "PASSWORD"):
        assert secret not in str(patroni["postgresql"]["authentication"])
        assert secret not in str(patroni["restapi"]["authentication"])
    # Only GETs (health checks) without a password: patroni.yml names the REST API's user.
    assert patroni["restapi"]["authentication"] == {"username": "patroni"}
