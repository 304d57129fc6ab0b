"""The shape of `gateway/envoy.yaml` as data, for the modules that render it: the names
of its listener, cluster and filters, the error every rendering step raises, and how to
reach a named item, a socket address and the HTTP connection managers of a listener."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

CONFIG_NAME = "envoy.yaml"
LISTENER_NAME = "pos_http"
CLUSTER_NAME = "loyalty_grpc"
LUA_FILTER = "envoy.filters.http.lua"
HCM_FILTER = "envoy.filters.network.http_connection_manager"
TRANSCODER_FILTER = "envoy.filters.http.grpc_json_transcoder"


class EnvoyError(RuntimeError):
    """Envoy could not be found, configured, validated or started."""


def named(items: list[dict[str, Any]], name: str, what: str) -> dict[str, Any]:
    for item in items:
        if item.get("name") == name:
            return item
    raise EnvoyError(f"{CONFIG_NAME}: no {what} named {name!r}")


def socket_address(holder: dict[str, Any]) -> dict[str, Any]:
    address: dict[str, Any] = holder["address"]["socket_address"]
    return address


def connection_managers(listener: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The typed_config of each HTTP connection manager of the listener."""
    for chain in listener["filter_chains"]:
        for network_filter in chain["filters"]:
            if network_filter["name"] == HCM_FILTER:
                manager: dict[str, Any] = network_filter["typed_config"]
                yield manager


def beside(directory: Path, configured: str) -> str:
    """`configured` (e.g. "gateway/envelope.lua") as an absolute path in `directory`."""
    path = (directory / Path(configured).name).resolve()
    if not path.is_file():
        raise EnvoyError(f"{path} does not exist (referenced by {CONFIG_NAME} as {configured})")
    return str(path)


__all__ = [
    "CLUSTER_NAME",
    "CONFIG_NAME",
    "HCM_FILTER",
    "LISTENER_NAME",
    "LUA_FILTER",
    "TRANSCODER_FILTER",
    "EnvoyError",
    "beside",
    "connection_managers",
    "named",
    "socket_address",
]
