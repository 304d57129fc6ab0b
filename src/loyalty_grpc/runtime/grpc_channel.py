"""The channel a `loyalty` command opens to a gRPC server (`admin`, `status`, the health
checks of `gateway reload`): plain, or with mutual TLS when LOYALTY_GRPC_TLS_* are set
(this process's certificate presented, the server's checked against the CA and against
the host name of the target, as gRPC does)."""

from __future__ import annotations

import grpc

from loyalty_grpc.runtime.settings import GrpcTls


def channel_credentials(tls: GrpcTls) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=tls.ca.read_bytes(),
        private_key=tls.key.read_bytes(),
        certificate_chain=tls.cert.read_bytes(),
    )


def open_channel(target: str, tls: GrpcTls | None) -> grpc.Channel:
    """A channel to `target` (`HOST:PORT`), with mutual TLS when `tls` is given."""
    if tls is None:
        return grpc.insecure_channel(target)
    return grpc.secure_channel(target, channel_credentials(tls))


__all__ = ["channel_credentials", "open_channel"]
