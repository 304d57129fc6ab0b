"""Everything derived from a single source is regenerated and compared."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


# Each generator, with what it derives (and from what).
GENERATORS = {
    "gen_proto.py": "proto code and Envoy's descriptor set",
    "gen_openapi.py": "the OpenAPI document",
    "gen_docs.py": "docs/errors.md's catalogue and docs/configuration.md's settings table",
    "gen_api_docs.py": "the API reference (docs/api.md) from the OpenAPI document",
    "gen_request_check.py": "request_check.lua's routes and parse limits",
    "gen_envelope.py": "envelope.lua's catalogue",
    "gen_edge.py": "envoy.yaml's binding routes and envelope.lua's edge block",
    "gen_dashboard.py": "the Grafana dashboard deploy/grafana/loyalty.json",
}


@pytest.mark.parametrize("script", list(GENERATORS))
def test_generated_file_is_fresh(script: str) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), "--check"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, f"{GENERATORS[script]}: " + result.stdout + result.stderr
