"""docker-compose.yml and deploy/ha/docker-compose.yml are valid under the Compose
specification's JSON schema (Compose v2: the copy vendored by check-jsonschema, offline) and
under docker-compose 1.29.2's own schema (the version Debian 12 ships:
tests/data/compose-spec-docker-compose-1.29.2.json, copied from its wheel), as written and
with their example env files' values substituted; each check runs check-jsonschema as a
process. The rest of the files: tests/unit/test_compose.py, tests/unit/test_ha_compose.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compose_files import env_file_keys, interpolate

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_V1_SCHEMA = ROOT / "tests" / "data" / "compose-spec-docker-compose-1.29.2.json"


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


# Each compose file and the example env files that configure it.
COMPOSE_FILES = {
    "docker-compose.yml": ["loyalty.env.example"],
    "deploy/ha/docker-compose.yml": ["loyalty.env.example", "deploy/ha/ha.env.example"],
}


@pytest.mark.parametrize("schema", ["v2", "v1.29"])
@pytest.mark.parametrize("compose", sorted(COMPOSE_FILES))
def test_valid_under_the_compose_specification(compose: str, schema: str, tmp_path: Path) -> None:
    result = check_compose_schema(ROOT / compose, schema)
    assert result.returncode == 0, result.stdout + result.stderr
    # Compose validates after substituting the variables: with the examples' values too.
    example: dict[str, str] = {}
    for name in COMPOSE_FILES[compose]:
        example |= env_file_keys(ROOT / name)
    rendered = tmp_path / "docker-compose.yml"
    rendered.write_text(interpolate((ROOT / compose).read_text(), example))
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
