"""examples/node/ against the real server: `npm ci` of the example (its lock file pins
@grpc/grpc-js and @grpc/proto-loader) in a temporary copy, then its script over a real
channel with the demo data: ping, a fan resolved with the typed `promo_detalle`, a sale
with the typed fields, and the ErrorInfo of a failure decoded with the repository's
google/rpc protos. Skipped only when node or npm is not installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import Engine

from loyalty_grpc.api.server import GrpcServer
from loyalty_grpc.runtime.cli.demo import demo_document
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.store.uow import run_in_uow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "node"
NODE, NPM = shutil.which("node"), shutil.which("npm")

pytestmark = pytest.mark.skipif(
    NODE is None or NPM is None, reason="node and npm are needed to run examples/node/"
)


def test_node_example_against_the_server(server: GrpcServer, engine: Engine, tmp_path: Path):
    assert NODE is not None
    assert NPM is not None
    run_in_uow(engine, apply_fixture, demo_document())
    copy = tmp_path / "node"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("node_modules"))
    env = {**os.environ, "npm_config_update_notifier": "false"}
    installed = subprocess.run(
        [NPM, "ci", "--no-audit", "--no-fund"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    done = subprocess.run(
        [NODE, "client.mjs"],
        cwd=copy,
        env={
            **env,
            "LOYALTY_TARGET": f"127.0.0.1:{server.port}",
            "LOYALTY_KEY": "lp_vivo_DemoCajaPrincipalTodos0000001",
            "LOYALTY_PROTO_DIR": str(ROOT / "proto"),
            "LOYALTY_ID_EXTERNO": "node-example-1",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    steps = {line["paso"]: line for line in map(json.loads, done.stdout.splitlines())}
    assert steps["ping"] == {"paso": "ping", "programa": "Club Demo", "modo": "vivo"}
    assert steps["resolve"] == {
        "paso": "resolve",
        "fan": "DEMO0001",
        "puntos": 1250,
        "promo": "HD-0003",
    }
    assert steps["tx"]["duplicado"] is False
    assert steps["tx"]["puntos_otorgados"] == 12
    assert steps["tx"]["puntos_acreditados"] == 12
    assert steps["error"]["status"] == "NOT_FOUND"
    assert steps["error"]["codigo"] == "fan_no_encontrado"
    assert steps["error"]["mensaje"] == "No se encontró al fan."
    assert steps["error"]["detalle"].startswith("ningún fan activo del programa coincide")
