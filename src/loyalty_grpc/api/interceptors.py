"""One interceptor at the edge of every RPC:

- POS calls: `Authorization: Bearer <key>` -> the key's program, mode and permissions
  (domain/keys.py, the cached lookup), the permission table (domain/permissions.py);
- back-office calls: the admin token;
- every LoyaltyError -> gRPC status + ErrorInfo + HTTP envelope (api/errors.py); a lost
  database -> servicio_no_disponible; anything else -> error_interno without internals.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc
from sqlalchemy import exc as sa_exc

from loyalty_grpc.api.context import reset_caller, set_caller
from loyalty_grpc.api.errors import to_grpc_status
from loyalty_grpc.api.key_cache import KeyCache
from loyalty_grpc.domain import keys, permissions
from loyalty_grpc.domain.errors import Codigo, LoyaltyError

log = logging.getLogger(__name__)

POS_SERVICE = "loyalty.v1.PosService"
BACKOFFICE_SERVICE = "loyalty.v1.BackofficeService"

Behavior = Callable[[object, grpc.ServicerContext], object]
if TYPE_CHECKING:  # grpc-stubs make it generic; the runtime class is not subscriptable
    Handler = grpc.RpcMethodHandler[object, object]

# Errors that mean "the database is not there right now": safe for the client to retry.
_UNAVAILABLE = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DisconnectionError,
                sa_exc.TimeoutError)


class EdgeInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    def __init__(self, keys_cache: KeyCache, admin_token: str) -> None:
        if not admin_token:
            raise ValueError("the admin token must not be empty")
        self._keys = keys_cache
        self._admin_token = admin_token.encode()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Handler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler  # health watch, reflection streams: not ours
        service, _, operation = handler_call_details.method.lstrip("/").partition("/")
        if service == POS_SERVICE:
            guarded = self._pos(operation, handler.unary_unary)
        elif service == BACKOFFICE_SERVICE:
            guarded = self._backoffice(handler.unary_unary)
        else:
            return handler
        return grpc.unary_unary_rpc_method_handler(
            _mapping_errors(guarded, handler_call_details.method),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _pos(self, operation: str, behavior: Behavior) -> Behavior:
        def guarded(request: object, context: grpc.ServicerContext) -> object:
            token = keys.bearer_token(_metadata(context, "authorization"))
            caller = self._keys.get(token) if keys.mode_of(token) else None
            if caller is None:
                raise LoyaltyError(Codigo.CLAVE_INVALIDA, "la clave no existe o fue revocada")
            permissions.check(operation, caller.permisos)
            reset = set_caller(caller)
            try:
                return behavior(request, context)
            finally:
                reset_caller(reset)

        return guarded

    def _backoffice(self, behavior: Behavior) -> Behavior:
        def guarded(request: object, context: grpc.ServicerContext) -> object:
            token = keys.bearer_token(_metadata(context, "authorization"))
            if not hmac.compare_digest(token.encode(), self._admin_token):
                raise LoyaltyError(Codigo.CLAVE_INVALIDA, "el token de administración no es válido")
            return behavior(request, context)

        return guarded


def _metadata(context: grpc.ServicerContext, name: str) -> str | None:
    for key, value in context.invocation_metadata():
        if key == name:
            return value if isinstance(value, str) else value.decode("latin-1")
    return None


def _mapping_errors(behavior: Behavior, method: str) -> Behavior:
    def mapped(request: object, context: grpc.ServicerContext) -> object:
        try:
            return behavior(request, context)
        except LoyaltyError as error:
            failure = error
        except _UNAVAILABLE:
            log.warning("database unavailable during %s", method, exc_info=True)
            failure = LoyaltyError(Codigo.SERVICIO_NO_DISPONIBLE,
                                   "la base de datos no responde; reintente")
        except Exception:
            log.exception("unexpected error in %s", method)
            failure = LoyaltyError(Codigo.ERROR_INTERNO, "")
        context.abort_with_status(to_grpc_status(failure))
        raise AssertionError("unreachable: abort_with_status raises")

    return mapped
