"""The client address of a call (api/client_address.py): the gateway's header only on
marked calls, else the gRPC peer; IPv6 counted by its /64."""

from __future__ import annotations

from typing import cast

import grpc
import pytest

from loyalty_grpc.api.client_address import (
    MAX_LENGTH,
    ClientAddress,
    client_address,
    counted_as,
    peer_host,
)
from loyalty_grpc.api.gateway_protocol import (
    CLIENT_ADDRESS_KEY,
    GATEWAY_MARK_KEY,
    GATEWAY_MARK_VALUE,
)


class Context:
    """What client_address reads of a grpc.ServicerContext."""

    def __init__(self, metadata: list[tuple[str, str | bytes]], peer: str) -> None:
        self._metadata = tuple(metadata)
        self._peer = peer

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer


def context(metadata: list[tuple[str, str | bytes]], peer: str) -> grpc.ServicerContext:
    return cast(grpc.ServicerContext, Context(metadata, peer))


MARK = (GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE)
PEER = "ipv4:127.0.0.1:40000"


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        ("ipv4:127.0.0.1:40000", "127.0.0.1"),
        ("ipv6:[::1]:40000", "::1"),
        ("ipv6:%5B2001:db8::7%5D:40000", "2001:db8::7"),  # grpc percent-encodes the brackets
        ("unix:/run/loyalty.sock", "unix:/run/loyalty.sock"),
    ],
)
def test_peer_host(peer: str, host: str) -> None:
    assert peer_host(peer) == host


@pytest.mark.parametrize(
    ("address", "name"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"),
        ("2001:db8:1:2::1", "2001:db8:1:2::/64"),  # the same /64
        ("[2001:db8:1:3::1]", "2001:db8:1:3::/64"),
        ("::ffff:198.51.100.1", "198.51.100.1"),
        ("fe80::1%eth0", "fe80::/64"),
        ("not an address", "not an address"),
        ("x" * 500, "x" * MAX_LENGTH),
    ],
)
def test_counted_as(address: str, name: str) -> None:
    assert counted_as(address) == name


def test_a_marked_call_is_from_the_gateways_address() -> None:
    call = context([MARK, (CLIENT_ADDRESS_KEY, "203.0.113.7")], PEER)
    assert client_address(call) == ClientAddress("203.0.113.7", via_gateway=True)


@pytest.mark.parametrize(
    "metadata",
    [
        [(CLIENT_ADDRESS_KEY, "203.0.113.7")],  # no mark
        [(GATEWAY_MARK_KEY, "0"), (CLIENT_ADDRESS_KEY, "203.0.113.7")],  # not the mark
        [],
    ],
)
def test_an_unmarked_call_is_from_its_peer(metadata: list[tuple[str, str | bytes]]) -> None:
    call = context(metadata, PEER)
    assert client_address(call) == ClientAddress("127.0.0.1", via_gateway=False)


def test_a_marked_call_without_the_address_is_from_its_peer() -> None:
    call = context([MARK], "ipv6:[2001:db8::9]:5000")
    assert client_address(call) == ClientAddress("2001:db8::/64", via_gateway=True)
