"""docker-compose.yml, Dockerfile and loyalty.env.example hang together (no Docker needed):
the file is valid under the Compose specification's JSON schema (the copy vendored by
check-jsonschema, offline), the services exist in the right order, the files they use
exist, and the ports agree with gateway/envoy.yaml."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from loyalty_grpc.runtime import envoy_config

ROOT = Path(__file__).resolve().parents[2]


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


def check_compose_schema(path: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema with its vendored compose-spec schema. Offline: a proxy that
    refuses every connection makes any network access fail."""
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
            "--builtin-schema",
            "vendor.compose-spec",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=60,
    )


def test_valid_under_the_compose_specification() -> None:
    result = check_compose_schema(ROOT / "docker-compose.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_compose_schema_check_rejects_a_broken_file(tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(
        "services:\n  envoy:\n    image: x\n    ports: {http: 8080}\n"
        "    depends_on: server\n    bogus: 1\n"
    )
    result = check_compose_schema(broken)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "bogus" in result.stdout


def test_services(services: dict[str, Any]) -> None:
    assert set(services) == {"postgres", "migrate", "server", "envoy"}
    assert services["postgres"]["image"].startswith("postgres:")


def test_referenced_files_exist(services: dict[str, Any]) -> None:
    for name in ("migrate", "server", "envoy"):
        build = services[name]["build"]
        assert (ROOT / build["context"] / build["dockerfile"]).is_file()
        for env_file in services[name]["env_file"]:
            assert env_file == "loyalty.env"
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


def test_env_example_configures_every_service() -> None:
    keys = env_file_keys(ROOT / "loyalty.env.example")
    assert {
        "POSTGRES_USER",
        "POSTGRES_PASSWORD",
        "POSTGRES_DB",
        "LOYALTY_DATABASE_URL",
        "LOYALTY_ADMIN_TOKEN",
    } <= set(keys)
    url = keys["LOYALTY_DATABASE_URL"]
    assert url.startswith(
        f"postgresql://{keys['POSTGRES_USER']}:{keys['POSTGRES_PASSWORD']}@postgres:5432/"
    )
    assert url.endswith(f"/{keys['POSTGRES_DB']}")


def test_healthcheck_snippets_compile(services: dict[str, Any]) -> None:
    for name in ("server", "envoy"):
        test = services[name]["healthcheck"]["test"]
        assert test[:3] == ["CMD", "python", "-c"]
        compile(test[3], f"{name} healthcheck", "exec")
