"""Whether a gRPC server answers its health check (grpc.health.v1), as a client of this
host sees it: `loyalty status` asks the server it talks to, `gateway reload` asks each
server before the gateway forwards calls to it (Envoy's own checks ask for the POS
service, gateway/envoy.yaml)."""

from __future__ import annotations

import socket

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from loyalty_grpc.runtime.grpc_channel import open_channel
from loyalty_grpc.runtime.settings import GrpcTls, split_target

HEALTH_TIMEOUT = 3.0
SERVING = "SERVING"


def health(
    target: str,
    *,
    tls: GrpcTls | None,
    service: str = "",
    timeout: float = HEALTH_TIMEOUT,
) -> str:
    """`SERVING`, or what the server at `target` answered instead (NOT_SERVING, ...),
    or why it did not answer (the gRPC status: UNAVAILABLE, DEADLINE_EXCEEDED, ...).
    `tls`: mutual TLS (LOYALTY_GRPC_TLS_*)."""
    with open_channel(target, tls) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            return f"{code.name if code is not None else 'error'}, unreachable"
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def nothing_listens(target: str, timeout: float = HEALTH_TIMEOUT) -> bool:
    """Whether `target` (a checked HOST:PORT) refuses a TCP connection: no process listens
    there. Any other outcome (accepted, a timeout, an unknown host) is not proof of that."""
    host, port = split_target(target)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


__all__ = ["HEALTH_TIMEOUT", "SERVING", "health", "nothing_listens"]
