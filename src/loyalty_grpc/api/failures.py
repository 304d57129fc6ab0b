"""What a call that failed answers: every LoyaltyError as itself; a value PostgreSQL
refused as the NUL character that caused it (api/requests.reject_nul names the field) or
error_interno; a lost database as servicio_no_disponible (safe to retry); anything else as
error_interno without internals (logged whole here, never sent). The answer is a gRPC
status with ErrorInfo (api/errors.py); the HTTP envelope metadata (`x-http-status`,
`x-envelope`) goes only to calls that carry the gateway mark `x-loyalty-gateway: 1`
(api/gateway_protocol.py), which Envoy sets on every request it forwards, so native gRPC
callers get the status and ErrorInfo alone. Here the mark is looked up only when a call
fails (on success only fan/resolve and a batch redeem look it up, to fill their typed
fields for native callers: api/native_fields.py)."""

from __future__ import annotations

import logging
from typing import NoReturn

import grpc
import psycopg
from google.protobuf.message import Message
from sqlalchemy import exc as sa_exc

from loyalty_grpc.api.call_metadata import Metadata, from_gateway
from loyalty_grpc.api.errors import to_grpc_status
from loyalty_grpc.api.requests import reject_nul
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError

log = logging.getLogger(__name__)

# Errors that mean "the database is not there right now": safe for the client to retry.
# (The hot paths use the psycopg connection directly: store/autocommit.py.)
_UNAVAILABLE = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.DisconnectionError,
    sa_exc.TimeoutError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)
# PostgreSQL (or psycopg) refused a value.
_BAD_VALUE = (sa_exc.DataError, psycopg.DataError)


def failure_of(error: Exception, request: object, method: str) -> LoyaltyError:
    """The LoyaltyError a call of `method` that raised `error` answers. Call it while the
    exception is being handled (an unexpected one is logged with its traceback)."""
    if isinstance(error, LoyaltyError):
        return error
    if isinstance(error, _BAD_VALUE):
        # A NUL character is the one value the rules of each field leave to PostgreSQL.
        return _nul_error(request) or _internal(method)
    if isinstance(error, _UNAVAILABLE):
        log.warning("database unavailable during %s", method, exc_info=True)
        return LoyaltyError(
            CodigoError.SERVICIO_NO_DISPONIBLE, "la base de datos no responde; reintente"
        )
    return _internal(method)


def abort(context: grpc.ServicerContext, failure: LoyaltyError, extra: Metadata) -> NoReturn:
    """End the call with `failure` (and the call's extra trailing metadata)."""
    status = to_grpc_status(failure, tuple(extra), for_gateway=from_gateway(context))
    context.abort_with_status(status)
    raise AssertionError("unreachable: abort_with_status raises")


def _internal(method: str) -> LoyaltyError:
    """error_interno for the exception being handled, logged whole (not sent)."""
    log.exception("unexpected error in %s", method)
    return LoyaltyError(CodigoError.ERROR_INTERNO, "")


def _nul_error(request: object) -> LoyaltyError | None:
    if not isinstance(request, Message):
        return None
    try:
        reject_nul(request)
    except LoyaltyError as error:
        return error
    return None


__all__ = ["abort", "failure_of"]
