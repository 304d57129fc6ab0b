"""Domain errors -> the wire: a real gRPC status with google.rpc.ErrorInfo for every
caller, plus the HTTP envelope as metadata for Envoy's Lua filter only.

The protocol with gateway/envelope.lua (names in api/gateway_protocol.py): a trailers-only
error carrying `x-http-status` (the catalogue's HTTP status) and `x-envelope` (the complete
envelope JSON, ASCII-escaped because metadata must be ASCII), sent only to a call that
carries the gateway mark `x-loyalty-gateway: 1` (Envoy sets it on every request it
forwards; api/interceptors.py looks for it when a call fails). Native gRPC callers get the
status, the ErrorInfo (and RetryInfo, `retry-after`, the RateLimit fields) without them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from loyalty_grpc.api.gateway_protocol import ENVELOPE_KEY, HTTP_STATUS_KEY
from loyalty_grpc.domain.errors import LoyaltyError

ERROR_DOMAIN = "loyalty.v1"
RETRY_AFTER_KEY = "retry-after"


@dataclass(frozen=True)
class _Status(grpc.Status):
    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, str | bytes], ...]


def envelope(error: LoyaltyError) -> str:
    """The JSON body an HTTP client sees: `ok` first, then `error`."""
    entry = error.entry
    body = {
        "ok": False,
        "error": {
            "codigo": entry.codigo.value,
            "mensaje": entry.mensaje,
            "detalle": error.detalle,
        },
    }
    return json.dumps(body, ensure_ascii=True, separators=(",", ":"))


def to_grpc_status(
    error: LoyaltyError,
    extra_metadata: tuple[tuple[str, str], ...] = (),
    *,
    for_gateway: bool,
) -> grpc.Status:
    """`extra_metadata`: more trailing metadata (e.g. the RateLimit fields); an error with
    `retry_after` also gets google.rpc.RetryInfo and `retry-after`. `for_gateway` (the call
    carries the gateway mark): also `x-http-status` and `x-envelope` for envelope.lua."""
    entry = error.entry
    code: grpc.StatusCode = getattr(grpc.StatusCode, entry.grpc)
    info = error_details_pb2.ErrorInfo(
        reason=entry.codigo.value,
        domain=ERROR_DOMAIN,
        metadata={
            "http_status": str(entry.http),
            "mensaje": entry.mensaje,
            "detalle": error.detalle,
        },
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    details = [detail]
    retry: tuple[tuple[str, str], ...] = ()
    if error.retry_after is not None:
        retry_info = any_pb2.Any()
        retry_info.Pack(
            error_details_pb2.RetryInfo(
                retry_delay=duration_pb2.Duration(seconds=error.retry_after)
            )
        )
        details.append(retry_info)
        retry = ((RETRY_AFTER_KEY, str(error.retry_after)),)
    message = error.detalle or entry.mensaje
    status = rpc_status.to_status(
        status_pb2.Status(code=code.value[0], message=message, details=details)
    )
    gateway: tuple[tuple[str, str], ...] = (
        ((HTTP_STATUS_KEY, str(entry.http)), (ENVELOPE_KEY, envelope(error))) if for_gateway else ()
    )
    return _Status(
        code=status.code,
        details=status.details,
        trailing_metadata=(*status.trailing_metadata, *gateway, *retry, *extra_metadata),
    )


__all__ = [
    "ENVELOPE_KEY",
    "ERROR_DOMAIN",
    "HTTP_STATUS_KEY",
    "RETRY_AFTER_KEY",
    "envelope",
    "to_grpc_status",
]
