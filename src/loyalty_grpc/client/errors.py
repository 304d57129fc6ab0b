"""A failed call, as the typed client raises it: one exception type, `LoyaltyCallError`,
with the service's `codigo`, `mensaje` and `detalle` taken from the google.rpc.ErrorInfo in
the status details (`grpc-status-details-bin`), the gRPC status code, and the RetryInfo
delay when the server sent one (429 demasiadas_llamadas). A failure the server did not
answer (no connection, the call's deadline) has no ErrorInfo: `codigo` is None and
`detalle` is gRPC's own text."""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2, status_pb2

STATUS_DETAILS_KEY = "grpc-status-details-bin"


class LoyaltyCallError(Exception):
    """A PosService call that failed (after the retries the policy allows, if any)."""

    def __init__(
        self,
        status: grpc.StatusCode,
        codigo: str | None,
        mensaje: str,
        detalle: str,
        *,
        retry_after: float | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(f"{codigo or status.name}: {detalle or mensaje}")
        self.status = status
        self.codigo = codigo
        self.mensaje = mensaje
        self.detalle = detalle
        self.retry_after = retry_after
        self.attempts = attempts


def _status_details(error: grpc.RpcError) -> status_pb2.Status | None:
    trailing: tuple[tuple[str, str | bytes], ...] = (
        tuple(error.trailing_metadata() or ()) if isinstance(error, grpc.Call) else ()
    )
    for key, value in trailing:
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            return status_pb2.Status.FromString(value)
    return None


def call_error(error: grpc.RpcError, attempts: int = 1) -> LoyaltyCallError:
    """The LoyaltyCallError of a failed call (its ErrorInfo and RetryInfo, when sent)."""
    code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
    text = (error.details() if isinstance(error, grpc.Call) else None) or str(error)
    status = _status_details(error)
    info: error_details_pb2.ErrorInfo | None = None
    retry_after: float | None = None
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_after = retry.retry_delay.ToTimedelta().total_seconds()
    if info is None:
        return LoyaltyCallError(code, None, text, text, retry_after=retry_after, attempts=attempts)
    return LoyaltyCallError(
        code,
        info.reason,
        info.metadata.get("mensaje", text),
        info.metadata.get("detalle", ""),
        retry_after=retry_after,
        attempts=attempts,
    )


__all__ = ["STATUS_DETAILS_KEY", "LoyaltyCallError", "call_error"]
