"""A real Envoy in front of a gRPC server the test writes: the answers the real server gives
a call through the gateway (`server_error`: the gRPC status with ErrorInfo and the envelope
metadata of api/failures.py), a grpcio server for the test's servicers, and a gateway
started on it. For tests of the gateway's own behaviour (tests/e2e/test_edge.py,
test_gateway_errors.py, test_strict_json.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from loyalty_grpc.api.gateway_protocol import ENVELOPE_KEY, HTTP_STATUS_KEY
from loyalty_grpc.domain.errors import CATALOGO, CodigoError
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
from tests.support import free_port


def envelope_text(codigo: CodigoError, detalle: str) -> str:
    """The envelope exactly as the server (and envelope.lua) write it."""
    body = {
        "ok": False,
        "error": {"codigo": codigo.value, "mensaje": CATALOGO[codigo].mensaje, "detalle": detalle},
    }
    return json.dumps(body, ensure_ascii=True, separators=(",", ":"))


@dataclass(frozen=True)
class _Status(grpc.Status):
    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, str | bytes], ...]


def server_error(
    codigo: CodigoError, detalle: str, extra: tuple[tuple[str, str], ...] = ()
) -> grpc.Status:
    """What the real server's interceptor sends a gateway-marked call: the real gRPC status
    with ErrorInfo, the HTTP status and envelope for envelope.lua, and `extra` metadata."""
    entrada = CATALOGO[codigo]
    code: grpc.StatusCode = getattr(grpc.StatusCode, entrada.grpc)
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.ErrorInfo(reason=codigo.value, domain="loyalty.v1"))
    status = rpc_status.to_status(
        status_pb2.Status(code=code.value[0], message=detalle, details=[detail])
    )
    return _Status(
        code=status.code,
        details=status.details,
        trailing_metadata=(
            *status.trailing_metadata,
            (HTTP_STATUS_KEY, str(entrada.http)),
            (ENVELOPE_KEY, envelope_text(codigo, detalle)),
            *extra,
        ),
    )


@contextmanager
def grpc_server(*add: Callable[[grpc.Server], None]) -> Iterator[int]:
    """A grpcio server on a free loopback port with the servicers each `add` puts on it
    (e.g. `lambda s: pb_grpc.add_PosServiceServicer_to_server(servicer, s)`): its port."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    for adding in add:
        adding(server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port
    finally:
        server.stop(grace=None)


def start_gateway(upstream_port: int, work: Path, gateway_dir: Path | None = None) -> EnvoyProcess:
    """`loyalty gateway run`'s Envoy on a free loopback port, forwarding to
    127.0.0.1:`upstream_port` (default: the repository's gateway folder)."""
    return EnvoyProcess.start_spec(
        gateway_spec(
            http_port=free_port(),
            upstreams=(f"127.0.0.1:{upstream_port}",),
            listen_host="127.0.0.1",
            gateway_dir=gateway_dir,
        ),
        work_dir=work,
    )


__all__ = ["envelope_text", "grpc_server", "server_error", "start_gateway"]
