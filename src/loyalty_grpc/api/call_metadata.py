"""Reading a call's metadata (gRPC headers), for the steps at the edge."""

from __future__ import annotations

import grpc

Metadata = list[tuple[str, str]]


def metadata_value(context: grpc.ServicerContext, name: str) -> str | None:
    """The first value of `name` in the call's metadata (None when absent)."""
    for key, value in context.invocation_metadata():
        if key == name:
            return value if isinstance(value, str) else value.decode("latin-1")
    return None


__all__ = ["Metadata", "metadata_value"]
