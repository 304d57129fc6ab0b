"""Envoy's admin interface, on the Unix socket of its work directory (runtime/gateway/
side_listeners.py `admin_pipe`: mode 0600, so this works as Envoy's user or root only):
readiness, the xDS stats that say whether Envoy took, refused or is still warming its
listeners and clusters, why it refused an update (its config dump), and the upstream
servers as its health checks and outlier detection see them."""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from loyalty_grpc.runtime.gateway.shape import (
    CLUSTER_NAME,
    EnvoyError,
)


@dataclass(frozen=True)
class XdsKind:
    """Listeners or clusters, as Envoy's stats report their xDS updates."""

    name: str
    prefix: str  # the subscription's stats
    warming: str  # the gauge of those not in use yet

    def version(self, stats: dict[str, str]) -> str:
        return stats.get(f"{self.prefix}.version_text", "")

    def accepted(self, stats: dict[str, str]) -> int:
        return int(stats.get(f"{self.prefix}.update_success", "0"))

    def rejected(self, stats: dict[str, str]) -> int:
        return int(stats.get(f"{self.prefix}.update_rejected", "0"))

    def settled(self, stats: dict[str, str]) -> bool:
        return stats.get(self.warming, "0") == "0"


LISTENERS = XdsKind("listeners", "listener_manager.lds", "listener_manager.total_listeners_warming")
CLUSTERS = XdsKind("clusters", "cluster_manager.cds", "cluster_manager.warming_clusters")


@dataclass(frozen=True)
class UpstreamHost:
    """One upstream server as Envoy sees it: `health` is "healthy" or why it is not."""

    cluster: str
    address: str
    health: str

    @property
    def healthy(self) -> bool:
        return self.health == HEALTHY


HEALTHY = "healthy"


def address_text(node: object) -> str:
    """An Envoy address (`{"socket_address": ...}`) as an operator types it."""
    socket = node.get("socket_address", {}) if isinstance(node, dict) else {}
    host, port = str(socket.get("address", "?")), socket.get("port_value", "?")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def host_health(status: object) -> str:
    """Envoy's health flags of one upstream host: "healthy", or the reasons it is not
    (failed_active_health_check, failed_outlier_check, ...)."""
    flags = status if isinstance(status, dict) else {}
    failed = sorted(name for name, value in flags.items() if name.startswith("failed") and value)
    eds = str(flags.get("eds_health_status", "HEALTHY"))
    if eds != "HEALTHY":
        failed.insert(0, eds.lower())
    return ", ".join(failed) if failed else HEALTHY


class _UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix socket."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(str(self._path))
        except OSError:
            sock.close()
            raise
        self.sock = sock


class EnvoyAdmin:
    """Envoy's admin interface on its Unix socket: readiness, stats, the config dump."""

    def __init__(self, path: Path, *, timeout: float = 2.0) -> None:
        self.path = path
        self.timeout = timeout

    def __str__(self) -> str:
        return str(self.path)

    def answers(self) -> bool:
        """Whether an Envoy serves on the socket now (a socket file left by an Envoy that
        died refuses the connection)."""
        try:
            self.get("/ready")
        except OSError:
            return False
        return True

    def get(self, path: str) -> tuple[int, str]:
        """(status, body); OSError when Envoy does not answer (PermissionError: this user
        may not open the socket)."""
        connection = _UnixConnection(self.path, self.timeout)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read().decode("utf-8", errors="replace")
        finally:
            connection.close()

    def json(self, path: str) -> dict[str, Any]:
        """The JSON an admin path answers; ValueError when it does not answer 200 with an
        object, OSError when Envoy does not answer."""
        status, body = self.get(path)
        if status != 200:
            raise ValueError(f"{path} answered {status}")
        loaded = json.loads(body)
        if not isinstance(loaded, dict):
            raise ValueError(f"{path} answered {type(loaded).__name__}, not an object")
        return loaded

    def upstream_hosts(self, cluster_name: str = CLUSTER_NAME) -> list[UpstreamHost]:
        """Every host of the cluster (the gRPC servers by default; not the metrics
        listener's `envoy_admin`), with its health."""
        clusters = self.json("/clusters?format=json")
        return [
            UpstreamHost(
                cluster=str(cluster.get("name", "?")),
                address=address_text(host.get("address")),
                health=host_health(host.get("health_status", {})),
            )
            for cluster in clusters.get("cluster_statuses", [])
            if cluster.get("name") == cluster_name
            for host in cluster.get("host_statuses", [])
        ]

    def ready(self) -> bool:
        """/ready answers 200 once the server is LIVE."""
        try:
            return self.get("/ready")[0] == 200
        except OSError:
            return False

    def xds_stats(self) -> dict[str, str]:
        """The listener and cluster managers' stats (xDS versions and update counters,
        warming gauges), text readouts unquoted."""
        pattern = urllib.parse.quote(r"^(listener|cluster)_manager\.")
        status, text = self.get(f"/stats?filter={pattern}")
        if status != 200:
            raise EnvoyError(f"Envoy's admin interface {self} answered {status} to /stats")
        stats: dict[str, str] = {}
        for line in text.splitlines():
            name, separator, value = line.partition(": ")
            if separator:
                stats[name] = value.strip().strip('"')
        return stats

    def update_errors(self, since: datetime | None = None) -> list[str]:
        """Why Envoy refused a listener or cluster update attempted at or after `since`
        (the error states of its config dump)."""
        status, text = self.get("/config_dump")
        if status != 200:
            return []
        reasons: list[str] = []
        for state in _error_states(json.loads(text)):
            attempted = state.get("last_update_attempt")
            if since is not None and attempted and datetime.fromisoformat(attempted) < since:
                continue
            detail = str(state.get("details", "")).strip()
            if detail and detail not in reasons:
                reasons.append(detail)
        return reasons


def _error_states(node: object) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "error_state" and isinstance(value, dict):
                yield value
            else:
                yield from _error_states(value)
    elif isinstance(node, list):
        for item in node:
            yield from _error_states(item)


__all__ = [
    "CLUSTERS",
    "HEALTHY",
    "LISTENERS",
    "EnvoyAdmin",
    "UpstreamHost",
    "XdsKind",
    "address_text",
    "host_health",
]
