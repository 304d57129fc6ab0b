"""HTTPS at the gateway and mutual TLS to the servers, added by rendering (never in
envoy.yaml).

HTTPS (`TlsFiles`: LOYALTY_TLS_CERT / LOYALTY_TLS_KEY): the listener gets a
DownstreamTlsContext (ALPN h2 and http/1.1, TLS 1.2 or newer) whose certificate comes by
SDS from a file (`tls_secret`, a Secret naming the PEM files, written into the work
directory by runtime/gateway/xds.py). Envoy watches the folder of the PEM files and reads
the pair again whenever a file is renamed into it, so replacing them (written aside,
renamed into place) rotates the certificate without a restart; connections already open
keep theirs. Every response of that listener carries `Strict-Transport-Security`
(`add_hsts`: LOYALTY_HSTS_MAX_AGE, default one year), the server's answers and Envoy's own
replies alike.

Mutual TLS to the servers (`GrpcTls`: LOYALTY_GRPC_TLS_*, optional): the cluster gets an
UpstreamTlsContext (ALPN h2, TLS 1.2 or newer) presenting Envoy's client certificate and
accepting only servers whose certificate chains to the CA, both by SDS from files in the
work directory (`upstream_secrets`) that name the operator's PEM files, so replacing those
rotates them as above. The health checks go through it too.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loyalty_grpc.runtime.gateway.shape import (
    CONFIG_NAME,
    LISTENER_NAME,
    EnvoyError,
    connection_managers,
)
from loyalty_grpc.runtime.settings import GrpcTls

# HTTPS (rendered only when TLS is configured).
TLS_TRANSPORT_SOCKET = "envoy.transport_sockets.tls"
DOWNSTREAM_TLS_TYPE = (
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
)
# An SDS resource type and name, not secrets themselves.
SECRET_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"  # noqa: S105
TLS_SECRET_NAME = "pos_tls_certificate"  # noqa: S105
TLS_ALPN = ("h2", "http/1.1")
TLS_MIN_VERSION = "TLSv1_2"
HSTS_HEADER = "strict-transport-security"
# Mutual TLS to the servers (rendered only when LOYALTY_GRPC_TLS_* are set).
UPSTREAM_TLS_TYPE = (
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
)
UPSTREAM_CERTIFICATE_NAME = "upstream_client_certificate"
UPSTREAM_CA_NAME = "upstream_ca"


@dataclass(frozen=True)
class TlsFiles:
    """The gateway's certificate (chain) and private key, PEM files (absolute paths)."""

    cert: Path
    key: Path


def _certificate_secret(name: str, cert: Path, key: Path) -> dict[str, Any]:
    """An SDS file holding one Secret that names a certificate's PEM files. When both are
    in one folder, Envoy watches that folder and reads the pair again (checking it read a
    consistent pair) whenever a file is moved into it; otherwise it watches the folder of
    each file."""
    certificate: dict[str, Any] = {
        "certificate_chain": {"filename": str(cert)},
        "private_key": {"filename": str(key)},
    }
    if cert.parent == key.parent:
        certificate["watched_directory"] = {"path": str(cert.parent)}
    secret = {"name": name, "tls_certificate": certificate}
    return {"version_info": f"{cert}:{key}", "resources": [{"@type": SECRET_TYPE, **secret}]}


def tls_secret(tls: TlsFiles) -> dict[str, Any]:
    """The SDS file of the listener's certificate (a DiscoveryResponse)."""
    return _certificate_secret(TLS_SECRET_NAME, tls.cert, tls.key)


def upstream_secrets(tls: GrpcTls) -> tuple[dict[str, Any], dict[str, Any]]:
    """The SDS files of mutual TLS to the servers: Envoy's client certificate, and the
    CA a server's certificate must chain to (re-read when a file is renamed into its
    folder)."""
    ca = {
        "name": UPSTREAM_CA_NAME,
        "validation_context": {
            "trusted_ca": {"filename": str(tls.ca)},
            "watched_directory": {"path": str(tls.ca.parent)},
        },
    }
    return (
        _certificate_secret(UPSTREAM_CERTIFICATE_NAME, tls.cert, tls.key),
        {"version_info": str(tls.ca), "resources": [{"@type": SECRET_TYPE, **ca}]},
    )


def _sds_config(path: Path) -> dict[str, Any]:
    """An SDS source: the file `path`, re-read when a file is renamed into its folder."""
    return {
        "path_config_source": {"path": str(path), "watched_directory": {"path": str(path.parent)}},
        "resource_api_version": "V3",
    }


def upstream_tls_transport_socket(certificate_path: Path, ca_path: Path) -> dict[str, Any]:
    """The cluster's mutual TLS: ALPN h2 (gRPC), TLS 1.2 at least, Envoy's certificate
    and the CA by SDS from the `upstream_secrets` files. The server's certificate must
    chain to the CA (a CA of the service's own: no name is checked, every server it signed
    is one of ours)."""
    return {
        "name": TLS_TRANSPORT_SOCKET,
        "typed_config": {
            "@type": UPSTREAM_TLS_TYPE,
            "common_tls_context": {
                "alpn_protocols": ["h2"],
                "tls_params": {"tls_minimum_protocol_version": TLS_MIN_VERSION},
                "tls_certificate_sds_secret_configs": [
                    {"name": UPSTREAM_CERTIFICATE_NAME, "sds_config": _sds_config(certificate_path)}
                ],
                "validation_context_sds_secret_config": {
                    "name": UPSTREAM_CA_NAME,
                    "sds_config": _sds_config(ca_path),
                },
            },
        },
    }


def tls_transport_socket(secret_path: Path) -> dict[str, Any]:
    """The listener's TLS: ALPN h2 then http/1.1, TLS 1.2 at least, the certificate by SDS
    from `secret_path` (a `tls_secret` file), re-read when a file is renamed into its
    folder."""
    sds_config = _sds_config(secret_path)
    return {
        "name": TLS_TRANSPORT_SOCKET,
        "typed_config": {
            "@type": DOWNSTREAM_TLS_TYPE,
            "common_tls_context": {
                "alpn_protocols": list(TLS_ALPN),
                "tls_params": {"tls_minimum_protocol_version": TLS_MIN_VERSION},
                "tls_certificate_sds_secret_configs": [
                    {"name": TLS_SECRET_NAME, "sds_config": sds_config}
                ],
            },
        },
    }


def add_tls(listener: dict[str, Any], secret_path: Path) -> None:
    for chain in listener["filter_chains"]:
        if "transport_socket" in chain:
            raise EnvoyError(
                f"{CONFIG_NAME}: listener {LISTENER_NAME!r} already has a transport_socket; "
                "TLS is added by rendering (LOYALTY_TLS_CERT / LOYALTY_TLS_KEY)"
            )
        chain["transport_socket"] = tls_transport_socket(secret_path)


def hsts_value(max_age: int, *, include_subdomains: bool = False) -> str:
    """The Strict-Transport-Security value: `max-age=N` (0 makes browsers forget the
    policy), `; includeSubDomains` only when asked for."""
    return f"max-age={max_age}" + ("; includeSubDomains" if include_subdomains else "")


def add_hsts(listener: dict[str, Any], value: str) -> None:
    """Strict-Transport-Security on every response of the HTTPS listener, by two paths
    that together cover all of them: the route table's response headers (the server's
    answers, direct responses such as openapi.json) and the local reply mapper's (every
    reply Envoy makes itself: 404, 413, the request check's 400, the 503 backstop even
    when it skips the filters). envelope.lua lets the header through (ALLOWED_HEADERS)."""
    header = {
        "header": {"key": HSTS_HEADER, "value": value},
        "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
    }
    for manager in connection_managers(listener):
        manager.setdefault("route_config", {}).setdefault("response_headers_to_add", []).append(
            copy.deepcopy(header)
        )
        replies = manager.setdefault("local_reply_config", {})
        mappers = replies.setdefault("mappers", [])
        for mapper in mappers:
            mapper.setdefault("headers_to_add", []).append(copy.deepcopy(header))
        # Last, for every local reply no mapper above took (the first that matches wins).
        mappers.append(
            {
                "filter": {
                    "status_code_filter": {
                        "comparison": {
                            "op": "GE",
                            "value": {"default_value": 0, "runtime_key": "loyalty.hsts_min_status"},
                        }
                    }
                },
                "headers_to_add": [copy.deepcopy(header)],
            }
        )


__all__ = [
    "DOWNSTREAM_TLS_TYPE",
    "HSTS_HEADER",
    "SECRET_TYPE",
    "TLS_ALPN",
    "TLS_MIN_VERSION",
    "TLS_SECRET_NAME",
    "TLS_TRANSPORT_SOCKET",
    "UPSTREAM_CA_NAME",
    "UPSTREAM_CERTIFICATE_NAME",
    "UPSTREAM_TLS_TYPE",
    "TlsFiles",
    "add_hsts",
    "add_tls",
    "hsts_value",
    "tls_secret",
    "tls_transport_socket",
    "upstream_secrets",
    "upstream_tls_transport_socket",
]
