"""The e2e session stack as tests see it (`Stack`: its URLs, keys, back office and
engine) and the standard keys every test program gets; tests/e2e/conftest.py starts it."""

from __future__ import annotations

import json
import secrets
import urllib.parse
from dataclasses import dataclass

import httpx
from sqlalchemy import Engine

from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as bo
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess
from tests.support import Admin

ALL = ["fan:leer", "tx:escribir", "redeem:escribir", "codigos:escribir", "roster:leer"]


def new_key(modo: str) -> str:
    return f"lp_{modo}_" + secrets.token_hex(16)


STANDARD_KEYS = {
    "todo": ("vivo", ALL),
    "prueba": ("prueba", ALL),
    "ping": ("vivo", []),
    "tx": ("vivo", ["tx:escribir"]),
    "redeem": ("vivo", ["redeem:escribir"]),
}


@dataclass
class Stack:
    base_url: str
    grpc_target: str
    envoy_port: int
    admin: Admin
    # integration name -> key
    keys: dict[str, str]
    # For assertions on what was stored (tests only read).
    engine: Engine
    # The running Envoy (its admin interface: `envoy_counter`).
    gateway: EnvoyProcess | None = None

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=10)

    def envoy_counter(self, name: str) -> int:
        """One of Envoy's counters (e.g. `cluster.loyalty_grpc.upstream_rq_retry`), read
        from its admin interface wherever the gateway says it is."""
        assert self.gateway is not None, "this stack has no gateway"
        admin = self.gateway.admin
        pattern = urllib.parse.quote("^" + name.replace(".", r"\.") + "$")
        status, body = admin.get(f"/stats?filter={pattern}")
        assert status == 200, body
        found, _, value = body.strip().partition(": ")
        assert found == name, body
        return int(value)

    def program(
        self,
        programa: str,
        *,
        tasa: str = "0.1",
        fans: list[dict[str, object]],
        promos: list[dict[str, object]] | None = None,
    ) -> dict[str, str]:
        """A program of the test module's own (so modules never see each other's rows),
        applied through the back office; returns its keys by the names of STANDARD_KEYS."""
        keys = {name: new_key(modo) for name, (modo, _) in STANDARD_KEYS.items()}
        document = {
            "programas": [
                {
                    "id": programa,
                    "nombre": f"Club {programa}",
                    "tasa_puntos": tasa,
                    "qr_url": f"https://{programa}.example/fan",
                    "claves": [
                        {"clave": keys[name], "integracion": f"Caja {name}", "permisos": perms}
                        for name, (_, perms) in STANDARD_KEYS.items()
                    ],
                    "fans": fans,
                    "promos": promos or [],
                }
            ]
        }
        self.admin.stub.ApplyFixture(
            bo.ApplyFixtureRequest(fixture_json=json.dumps(document)), metadata=self.admin.md
        )
        return keys
