"""The channel of the typed client: plain, or with mutual TLS (the same files as the
`loyalty` commands: runtime/grpc_channel.py, LOYALTY_GRPC_TLS_*), with gRPC's reconnect
back-off bounded by the retry policy's (gRPC's own grows to 120 s: a server restarted
under a client would otherwise stay unreachable to it long after it is back); and the API
key as call metadata."""

from __future__ import annotations

import grpc

from loyalty_grpc.client.retry import RetryPolicy
from loyalty_grpc.runtime.grpc_channel import channel_credentials
from loyalty_grpc.runtime.settings import GrpcTls

Metadata = tuple[tuple[str, str], ...]


def channel_options(policy: RetryPolicy) -> list[tuple[str, int]]:
    """Reconnect after a lost connection as the retries back off (ms)."""
    return [
        ("grpc.initial_reconnect_backoff_ms", max(1, round(policy.initial_backoff * 1000))),
        ("grpc.min_reconnect_backoff_ms", max(1, round(policy.initial_backoff * 1000))),
        ("grpc.max_reconnect_backoff_ms", max(1, round(policy.max_backoff * 1000))),
    ]


def open_pos_channel(target: str, policy: RetryPolicy, tls: GrpcTls | None = None) -> grpc.Channel:
    """A channel to the gRPC port `target` (HOST:PORT), with mutual TLS when `tls` is given."""
    options = channel_options(policy)
    if tls is None:
        return grpc.insecure_channel(target, options=options)
    return grpc.secure_channel(target, channel_credentials(tls), options=options)


def key_metadata(key: str) -> Metadata:
    """`authorization: Bearer <key>`, what every PosService call carries."""
    return (("authorization", f"Bearer {key}"),)


__all__ = ["Metadata", "channel_options", "key_metadata", "open_pos_channel"]
