"""The gateway folder (gateway/) and the specs the gateway tests render from it, shared by
tests/unit/test_gateway_config.py, tests/unit/test_gateway_tls.py and
tests/integration/test_gateway_validate.py."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from loyalty_grpc.runtime.gateway import config as envoy_config
from loyalty_grpc.runtime.gateway.config import (
    GatewaySpec,
)
from loyalty_grpc.runtime.gateway.tls import (
    TlsFiles,
)

ROOT = Path(__file__).resolve().parents[1]
GATEWAY = ROOT / "gateway"
# Where a rendering (without a running Envoy) puts the admin interface's Unix socket.
ADMIN_SOCKET = Path("/run/loyalty-test/envoy/admin/envoy.sock")


def hcm(config: dict[str, Any]) -> dict[str, Any]:
    (listener,) = config["static_resources"]["listeners"]
    (chain,) = listener["filter_chains"]
    (network_filter,) = chain["filters"]
    assert network_filter["name"] == "envoy.filters.network.http_connection_manager"
    typed: dict[str, Any] = network_filter["typed_config"]
    return typed


def routes(config: dict[str, Any]) -> list[dict[str, Any]]:
    (virtual_host,) = hcm(config)["route_config"]["virtual_hosts"]
    found: list[dict[str, Any]] = virtual_host["routes"]
    return found


def spec(gateway_dir: Path = GATEWAY) -> envoy_config.GatewaySpec:
    return envoy_config.GatewaySpec(
        http_port=18080,
        upstreams=("server:50052",),
        gateway_dir=gateway_dir,
        listen_host="127.0.0.1",
    )


def gateway_copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(GATEWAY, tmp_path / "gateway"))


def tls_spec(tls: TlsFiles | None) -> GatewaySpec:
    return GatewaySpec(
        http_port=8443,
        upstreams=("127.0.0.1:50051",),
        gateway_dir=envoy_config.find_gateway_dir(),
        tls_cert=tls.cert if tls else None,
        tls_key=tls.key if tls else None,
    )
