"""The client address a call's failed key checks are counted by (api/failed_checks.py).

A call through the gateway (it carries the gateway mark, api/gateway_protocol.py) is from
the address Envoy puts in `x-loyalty-client-address`: the TCP peer of the HTTP
connection, or, when the operator configured trusted proxies (LOYALTY_TRUSTED_PROXIES),
the client address those proxies put in `X-Forwarded-For`. Envoy overwrites whatever a
client sent under that name, and nothing here reads `X-Forwarded-For` (a client's own
entries stay in it). A native gRPC call is from its gRPC peer (`context.peer()`); so is a
marked call without the header (a gateway configured by an older version).

The gRPC port also serves the back office and must not be public (LOYALTY_GRPC_HOST is
loopback by default; mutual TLS is available): a native caller that sends the mark and the
header chooses the address it is counted under, as Envoy does.

Addresses are counted as given, except that an IPv6 address counts as its /64 (one
customer network: an attacker with one has 2^64 addresses) and an IPv4-mapped IPv6
address as the IPv4 address. Anything else (a Unix socket peer) counts as its text, at
most MAX_LENGTH characters.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import unquote

import grpc

from loyalty_grpc.api.gateway_protocol import (
    CLIENT_ADDRESS_KEY,
    GATEWAY_MARK_KEY,
    GATEWAY_MARK_VALUE,
)

MAX_LENGTH = 64
IPV6_PREFIX = 64


@dataclass(frozen=True)
class ClientAddress:
    # What the failed checks are counted under (never sent to a client: personal data).
    counted_as: str
    # The call carries the gateway mark (its refusals carry the address verdict).
    via_gateway: bool


def client_address(context: grpc.ServicerContext) -> ClientAddress:
    marked = False
    forwarded: str | None = None
    for key, value in context.invocation_metadata():
        if key == GATEWAY_MARK_KEY:
            marked = _text(value) == GATEWAY_MARK_VALUE
        elif key == CLIENT_ADDRESS_KEY and forwarded is None:
            forwarded = _text(value)
    if marked and forwarded:
        return ClientAddress(counted_as(forwarded), via_gateway=True)
    return ClientAddress(counted_as(peer_host(context.peer())), via_gateway=marked)


def peer_host(peer: str) -> str:
    """The host of a gRPC peer string (`ipv4:1.2.3.4:5678`, `ipv6:[::1]:5678`, possibly
    percent-encoded); another kind of peer (`unix:/path`) as it is."""
    scheme, _, rest = peer.partition(":")
    if scheme not in ("ipv4", "ipv6"):
        return peer
    host, _, _port = unquote(rest).rpartition(":")
    return host.strip("[]")


def counted_as(address: str) -> str:
    """The name an address's failed checks are counted under (see the module doc)."""
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]"))
    except ValueError:
        return address[:MAX_LENGTH]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        network = int(ip) >> (128 - IPV6_PREFIX) << (128 - IPV6_PREFIX)
        return f"{ipaddress.IPv6Address(network)}/{IPV6_PREFIX}"
    return str(ip)


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("latin-1")


__all__ = ["IPV6_PREFIX", "MAX_LENGTH", "ClientAddress", "client_address", "counted_as"]
