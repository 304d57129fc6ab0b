"""docker-compose.yml, Dockerfile and loyalty.env.example hang together (no Docker needed):
the services exist in the right order, each gets only the variables it needs, the files
they use exist, and the ports agree with gateway/envoy.yaml. The file's validity under both
Compose schemas (check-jsonschema, a process): tests/integration/test_compose_schema.py."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from loyalty_grpc.runtime.cli.parser import build_parser
from loyalty_grpc.runtime.gateway import config as envoy_config
from loyalty_grpc.runtime.settings import VARIABLES, ConfigError, Settings
from loyalty_grpc.store.db import parse_url
from tests.compose_files import REFERENCE, env_file_keys, interpolate

ROOT = Path(__file__).resolve().parents[2]
# Required in .env; the database password is a compose secret instead (a file).
SECRETS = ("LOYALTY_ADMIN_TOKEN",)
PASSWORD_SECRET = "database_password"
PASSWORD_FILE = f"/run/secrets/{PASSWORD_SECRET}"


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
    # Envoy's admin interface is a Unix socket; the healthcheck reads /ready from the
    # metrics listener, on loopback inside the container unless .env says otherwise.
    assert "pipe" in config["admin"]["address"]
    metrics_port = int(option(gateway, "--envoy-metrics-port"))
    assert "--envoy-metrics-host" not in gateway
    healthcheck = " ".join(services["envoy"]["healthcheck"]["test"])
    assert f"127.0.0.1:{metrics_port}/ready" in healthcheck
    assert str(metrics_port) not in str(services["envoy"]["ports"])
    assert f"127.0.0.1:{grpc_port}" in " ".join(services["server"]["healthcheck"]["test"])


def test_env_example_configures_every_service(services: dict[str, Any]) -> None:
    """Every variable the file requires (${NAME:?…}) is in the example, and the example
    names no variable the file does not use."""
    text = (ROOT / "docker-compose.yml").read_text()
    references = REFERENCE.findall(text)
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
        "postgres": set(),
        "migrate": set(),
        "server": {"LOYALTY_ADMIN_TOKEN"},
        "envoy": set(),
    }
    assert "LOYALTY_ADMIN_TOKEN" not in environment(services["migrate"])
    # The database password: the secret, to the three services that use it only.
    given = {name: service.get("secrets", []) for name, service in services.items()}
    assert given == {
        "postgres": [PASSWORD_SECRET],
        "migrate": [PASSWORD_SECRET],
        "server": [PASSWORD_SECRET],
        "envoy": [],
    }
    assert "PASSWORD" not in str(environment(services["envoy"]))


def test_the_database_url_reaches_the_postgres_service(
    compose: dict[str, Any], services: dict[str, Any], tmp_path: Path
) -> None:
    """`migrate` and `server` connect as PostgreSQL's user to its database, with the
    password PostgreSQL was initialised with: the same secret file, read by the settings
    (LOYALTY_DATABASE_PASSWORD_FILE), never in the URL or an environment variable."""
    assert compose["secrets"] == {PASSWORD_SECRET: {"file": "./secrets/database_password"}}
    example = env_file_keys(ROOT / "loyalty.env.example")
    postgres = {k: interpolate(v, example) for k, v in environment(services["postgres"]).items()}
    assert postgres["POSTGRES_PASSWORD_FILE"] == PASSWORD_FILE
    assert "POSTGRES_PASSWORD" not in postgres
    secret = tmp_path / PASSWORD_SECRET
    secret.write_text("p@ss:word/with%chars\n", encoding="utf-8")
    for name in ("migrate", "server"):
        given = {k: interpolate(v, example) for k, v in environment(services[name]).items()}
        assert given["LOYALTY_DATABASE_URL"] == (
            f"postgresql://{postgres['POSTGRES_USER']}@postgres:5432/{postgres['POSTGRES_DB']}"
        )
        assert given["LOYALTY_DATABASE_PASSWORD_FILE"] == PASSWORD_FILE
        # As `loyalty` reads it in the container (the secret's file at its place here).
        given["LOYALTY_DATABASE_PASSWORD_FILE"] = str(secret)
        given.pop("LOYALTY_ADMIN_TOKEN", None)  # the example's, refused by name
        settings = Settings.from_env(given, wallet=False)
        assert settings.database_url is not None
        url = parse_url(settings.database_url)
        assert (url.username, url.password, url.host, url.port, url.database) == (
            postgres["POSTGRES_USER"],
            "p@ss:word/with%chars",
            "postgres",
            5432,
            postgres["POSTGRES_DB"],
        )


def test_a_missing_secret_stops_compose_with_a_message() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    with pytest.raises(AssertionError, match=r"set LOYALTY_ADMIN_TOKEN in \.env"):
        interpolate(text, {})


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


def _envoy_settings(services: dict[str, Any], env: dict[str, str]) -> Settings:
    """The `envoy` service's settings with .env holding `env` (plus the example's
    secrets), as `gateway run` reads its environment and then its flags."""
    example = env_file_keys(ROOT / "loyalty.env.example") | env
    given = {k: interpolate(v, example) for k, v in environment(services["envoy"]).items()}
    parsed = build_parser().parse_args(command(services["envoy"]))
    return Settings.from_env(given, wallet=False).with_flags(
        http_host=parsed.http_host, plain_http_beyond_loopback=parsed.plain_http_beyond_loopback
    )


def test_envoy_serves_beyond_loopback_only_as_https_or_plain_http_by_name(
    services: dict[str, Any],
) -> None:
    """In its container Envoy must listen on 0.0.0.0 (the published port does not reach
    its loopback). Plain HTTP there is the operator's choice in .env, never a default:
    the example as copied stops the service with the one-line reason."""
    assert option(command(services["envoy"]), "--http-host") == "0.0.0.0"
    assert "--plain-http-beyond-loopback" not in command(services["envoy"])
    given = environment(services["envoy"])
    assert given["LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK"] == "${LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK:-}"
    as_copied = _envoy_settings(services, {})
    with pytest.raises(
        ConfigError, match=r"0\.0\.0\.0 is beyond loopback and the gateway has no TLS"
    ):
        as_copied.gateway_listen_host(tls=as_copied.tls_cert is not None)
    https = _envoy_settings(
        services, {"LOYALTY_TLS_CERT": "/certs/server.pem", "LOYALTY_TLS_KEY": "/certs/server.key"}
    )
    assert https.gateway_listen_host(tls=https.tls_cert is not None) == "0.0.0.0"
    plain = _envoy_settings(services, {"LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK": "1"})
    assert plain.gateway_listen_host(tls=False) == "0.0.0.0"
