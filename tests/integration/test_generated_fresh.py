"""Everything derived from a single source is regenerated and compared."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), "--check"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )


def test_generated_proto_code_and_descriptor_are_fresh():
    result = _run("gen_proto.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_openapi_document_is_fresh():
    result = _run("gen_openapi.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_readme_error_catalogue_is_fresh():
    result = _run("gen_docs.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_request_check_routes_are_fresh():
    result = _run("gen_request_check.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_envelope_catalogue_is_fresh():
    result = _run("gen_envelope.py")
    assert result.returncode == 0, result.stdout + result.stderr
