"""docker-compose.yml, Dockerfile and loyalty.env.example hang together (no Docker needed):
the file is valid under the Compose specification's JSON schema (Compose v2: the copy
vendored by check-jsonschema, offline) and under docker-compose 1.29.2's own schema (the
version Debian 12 ships: tests/data/compose-spec-docker-compose-1.29.2.json, copied from
its wheel), the services exist in the right order, each gets only the variables it needs,
the files they use exist, and the ports agree with gateway/envoy.yaml."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from loyalty_grpc.runtime import envoy_config
from loyalty_grpc.runtime.settings import VARIABLES

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_V1_SCHEMA = ROOT / "tests" / "data" / "compose-spec-docker-compose-1.29.2.json"
SECRETS = ("POSTGRES_PASSWORD", "LOYALTY_ADMIN_TOKEN")
# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}
_REFERENCE = re.compile(r"\$\{([A-Z0-9_]+)(?:(:?[-?])([^}]*))?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = compose["services"]
    return found


def command(service: dict[str, Any]) -> list[str]:
    value = service["command"]
    return shlex.split(value) if isinstance(value, str) else [str(part) for part in value]


def option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def env_file_keys(path: Path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


def interpolate(text: str, values: dict[str, str]) -> str:
    """Compose's variable substitution, as far as this file uses it."""

    def one(match: re.Match[str]) -> str:
        name, operator, argument = match.groups()
        if values.get(name):
            return values[name]
        if operator and operator.endswith("?"):
            raise AssertionError(f"{name} unset: {argument}")
        return argument or ""

    return _REFERENCE.sub(one, text.replace("$$", "\0")).replace("\0", "$")


def check_compose_schema(path: Path, schema: str = "v2") -> subprocess.CompletedProcess[str]:
    """check-jsonschema with the Compose v2 schema it vendors, or with docker-compose
    1.29.2's. Offline: a proxy that refuses every connection makes any network access
    fail."""
    env = {
        **os.environ,
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "",
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            *(
                ["--builtin-schema", "vendor.compose-spec"]
                if schema == "v2"
                else ["--schemafile", str(COMPOSE_V1_SCHEMA)]
            ),
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=60,
    )


@pytest.mark.parametrize("schema", ["v2", "v1.29"])
def test_valid_under_the_compose_specification(schema: str, tmp_path: Path) -> None:
    result = check_compose_schema(ROOT / "docker-compose.yml", schema)
    assert result.returncode == 0, result.stdout + result.stderr
    # Compose validates after substituting the variables: with the example's values too.
    example = env_file_keys(ROOT / "loyalty.env.example")
    rendered = tmp_path / "docker-compose.yml"
    rendered.write_text(interpolate((ROOT / "docker-compose.yml").read_text(), example))
    result = check_compose_schema(rendered, schema)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("schema", ["v2", "v1.29"])
def test_the_compose_schema_check_rejects_a_broken_file(schema: str, tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(
        "services:\n  envoy:\n    image: x\n    ports: {http: 8080}\n"
        "    depends_on: server\n    bogus: 1\n"
    )
    result = check_compose_schema(broken, schema)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "bogus" in result.stdout


def test_docker_compose_1_29_refuses_a_top_level_name(tmp_path: Path) -> None:
    """Why the file has no `name:` (Compose v2 accepts it, 1.29 does not)."""
    named = tmp_path / "docker-compose.yml"
    named.write_text("name: loyalty\nservices:\n  db:\n    image: postgres:18\n")
    assert check_compose_schema(named, "v2").returncode == 0
    result = check_compose_schema(named, "v1.29")
    assert result.returncode == 1
    assert "'name' does not match any of the regexes" in result.stdout


def test_services(services: dict[str, Any]) -> None:
    assert set(services) == {"postgres", "migrate", "server", "envoy"}
    assert services["postgres"]["image"].startswith("postgres:")


def test_referenced_files_exist(services: dict[str, Any]) -> None:
    for name in ("migrate", "server", "envoy"):
        build = services[name]["build"]
        assert (ROOT / build["context"] / build["dockerfile"]).is_file()
    assert (ROOT / "loyalty.env.example").is_file()
    assert (ROOT / "gateway" / "envoy.yaml").is_file()


def test_dockerfile_ships_the_gateway_and_runs_loyalty() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY gateway ./gateway" in dockerfile  # force-included into the wheel
    assert 'ENTRYPOINT ["loyalty"]' in dockerfile


def test_start_order(services: dict[str, Any]) -> None:
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert command(services["migrate"]) == ["migrate"]
    assert services["server"]["depends_on"] == {
        "migrate": {"condition": "service_completed_successfully"}
    }
    assert services["envoy"]["depends_on"] == {"server": {"condition": "service_healthy"}}
    for name in ("postgres", "server", "envoy"):
        assert services[name]["healthcheck"]["test"]


def test_ports_agree_with_envoy_yaml(services: dict[str, Any]) -> None:
    config = envoy_config.load_config(ROOT / "gateway")
    (listener,) = config["static_resources"]["listeners"]
    http_port = listener["address"]["socket_address"]["port_value"]
    (cluster,) = config["static_resources"]["clusters"]
    grpc_port = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"][
        "address"
    ]["socket_address"]["port_value"]
    admin_port = config["admin"]["address"]["socket_address"]["port_value"]

    serve = command(services["server"])
    assert serve[0] == "serve"
    assert int(option(serve, "--grpc-port")) == grpc_port
    assert str(grpc_port) in [str(port) for port in services["server"]["expose"]]
    assert "ports" not in services["server"]  # gRPC (and the back office) stays internal

    gateway = command(services["envoy"])
    assert gateway[:2] == ["gateway", "run"]
    assert option(gateway, "--upstream") == f"server:{grpc_port}"
    assert int(option(gateway, "--http-port")) == http_port
    assert services["envoy"]["ports"] == [f"{http_port}:{http_port}"]
    assert int(option(gateway, "--admin-port")) == admin_port
    healthcheck = " ".join(services["envoy"]["healthcheck"]["test"])
    assert f"127.0.0.1:{admin_port}/ready" in healthcheck
    assert f"127.0.0.1:{grpc_port}" in " ".join(services["server"]["healthcheck"]["test"])


def test_env_example_configures_every_service(services: dict[str, Any]) -> None:
    """Every variable the file requires (${NAME:?…}) is in the example, and the example
    names no variable the file does not use."""
    text = (ROOT / "docker-compose.yml").read_text()
    references = _REFERENCE.findall(text)
    required = {name for name, operator, _ in references if operator.endswith("?")}
    example = env_file_keys(ROOT / "loyalty.env.example")
    assert required == set(SECRETS)
    assert required <= set(example)
    assert set(example) <= {name for name, _, _ in references}


def environment(service: dict[str, Any]) -> dict[str, str]:
    assert "env_file" not in service  # a whole file would hand every secret to everyone
    values: dict[str, str] = service.get("environment", {})
    return values


def test_each_service_gets_only_what_it_needs(services: dict[str, Any]) -> None:
    known = {variable.name for variable in VARIABLES}
    for name, service in services.items():
        for variable in environment(service):
            assert variable.startswith("POSTGRES_") or variable in known, (name, variable)
    seen = {
        name: {secret for secret in SECRETS if f"${{{secret}" in str(environment(service))}
        for name, service in services.items()
    }
    assert seen == {
        "postgres": {"POSTGRES_PASSWORD"},
        "migrate": {"POSTGRES_PASSWORD"},
        "server": {"POSTGRES_PASSWORD", "LOYALTY_ADMIN_TOKEN"},
        "envoy": set(),
    }
    assert "LOYALTY_ADMIN_TOKEN" not in environment(services["migrate"])


def test_the_database_url_reaches_the_postgres_service(services: dict[str, Any]) -> None:
    example = env_file_keys(ROOT / "loyalty.env.example")
    postgres = {k: interpolate(v, example) for k, v in environment(services["postgres"]).items()}
    for name in ("migrate", "server"):
        url = interpolate(environment(services[name])["LOYALTY_DATABASE_URL"], example)
        assert url == (
            f"postgresql://{postgres['POSTGRES_USER']}:{postgres['POSTGRES_PASSWORD']}"
            f"@postgres:5432/{postgres['POSTGRES_DB']}"
        )


def test_a_missing_secret_stops_compose_with_a_message() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    with pytest.raises(AssertionError, match=r"set LOYALTY_ADMIN_TOKEN in \.env"):
        interpolate(text, {"POSTGRES_PASSWORD": "x"})


def test_healthcheck_snippets_compile(services: dict[str, Any]) -> None:
    for name in ("server", "envoy"):
        test = services[name]["healthcheck"]["test"]
        assert test[:3] == ["CMD", "python", "-c"]
        compile(test[3], f"{name} healthcheck", "exec")


def test_only_envoy_gets_the_tls_files(services: dict[str, Any]) -> None:
    """HTTPS is Envoy's: only its service gets LOYALTY_TLS_CERT/KEY and the certificate
    folder, mounted read-only as a folder (a pair renamed into place rotates it)."""
    tls = {"LOYALTY_TLS_CERT", "LOYALTY_TLS_KEY"}
    for name, service in services.items():
        given = tls & set(environment(service))
        assert given == (tls if name == "envoy" else set()), name
    assert environment(services["envoy"])["LOYALTY_TLS_CERT"] == "${LOYALTY_TLS_CERT:-}"
    assert services["envoy"]["volumes"] == ["${LOYALTY_TLS_DIR:-./certs}:/certs:ro"]
    assert all("volumes" not in services[name] for name in ("migrate", "server"))
