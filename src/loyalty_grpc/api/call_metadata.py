"""Reading a call's metadata (gRPC headers), for the steps at the edge."""

from __future__ import annotations

import grpc

from loyalty_grpc.api.gateway_protocol import GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE

Metadata = list[tuple[str, str]]


def metadata_value(context: grpc.ServicerContext, name: str) -> str | None:
    """The first value of `name` in the call's metadata (None when absent)."""
    for key, value in context.invocation_metadata():
        if key == name:
            return value if isinstance(value, str) else value.decode("latin-1")
    return None


def from_gateway(context: grpc.ServicerContext) -> bool:
    """Whether the call came through the gateway (it carries the mark Envoy sets on every
    request it forwards: api/gateway_protocol.py). One scan of the call's metadata."""
    return metadata_value(context, GATEWAY_MARK_KEY) == GATEWAY_MARK_VALUE


__all__ = ["Metadata", "from_gateway", "metadata_value"]
