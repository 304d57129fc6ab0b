"""One interceptor at the edge of every RPC:

- POS calls: `Authorization: Bearer <key>` -> the key's program, mode and permissions
  (domain/keys.py, the cached lookup), the permission table (domain/permissions.py);
- back-office calls: the admin token;
- POS calls, right after the key is known (before the permission check, so every
  authenticated call counts): the per-key call limit (services/rate_limit.py). Over it:
  demasiadas_llamadas with Retry-After/RetryInfo. The IETF RateLimit fields
  (`ratelimit-policy`, `ratelimit`) go out as initial metadata on success and as trailing
  metadata on errors: an error must stay trailers-only for the Lua envelope filter, so no
  initial metadata is sent before the outcome is known;
- every LoyaltyError -> gRPC status + ErrorInfo (api/errors.py); a lost database ->
  servicio_no_disponible; anything else -> error_interno without internals. The HTTP
  envelope metadata (`x-http-status`, `x-envelope`) goes only to calls that carry the
  gateway mark `x-loyalty-gateway: 1` (api/gateway_protocol.py), which Envoy sets on every
  request it forwards: native gRPC callers get the status and ErrorInfo alone. The mark is
  looked up only when a call fails (successful calls do no extra work).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc
import psycopg
from google.protobuf.message import Message
from sqlalchemy import exc as sa_exc

from loyalty_grpc.api.context import reset_caller, set_caller
from loyalty_grpc.api.errors import to_grpc_status
from loyalty_grpc.api.gateway_protocol import GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE
from loyalty_grpc.api.key_cache import KeyCache
from loyalty_grpc.api.requests import reject_nul
from loyalty_grpc.domain import keys, permissions
from loyalty_grpc.domain.errors import Codigo, LoyaltyError
from loyalty_grpc.services.rate_limit import RateLimiter

log = logging.getLogger(__name__)

POS_SERVICE = "loyalty.v1.PosService"
BACKOFFICE_SERVICE = "loyalty.v1.BackofficeService"

Behavior = Callable[[object, grpc.ServicerContext], object]
Metadata = list[tuple[str, str]]
# A guarded behaviour also gets the call's list of extra trailing metadata for errors.
Guarded = Callable[[object, grpc.ServicerContext, Metadata], object]
RATELIMIT_POLICY_KEY = "ratelimit-policy"
RATELIMIT_KEY = "ratelimit"
if TYPE_CHECKING:  # grpc-stubs make it generic; the runtime class is not subscriptable
    Handler = grpc.RpcMethodHandler[object, object]

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


class EdgeInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    def __init__(
        self, keys_cache: KeyCache, admin_token: str, limiter: RateLimiter | None = None
    ) -> None:
        if not admin_token:
            raise ValueError("the admin token must not be empty")
        self._keys = keys_cache
        self._admin_token = admin_token.encode()
        self._limiter = limiter
        # grpc asks for every call's handler: ours are built once per method.
        self._handlers: dict[str, Handler] = {}

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Handler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        method = handler_call_details.method
        if method in self._handlers:
            return self._handlers[method]
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler  # health watch, reflection streams: not ours
        service, _, operation = method.lstrip("/").partition("/")
        if service == POS_SERVICE:
            guarded = self._pos(operation, handler.unary_unary)
        elif service == BACKOFFICE_SERVICE:
            guarded = self._backoffice(handler.unary_unary)
        else:
            return handler
        self._handlers[method] = grpc.unary_unary_rpc_method_handler(
            _mapping_errors(guarded, method),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
        return self._handlers[method]

    def _pos(self, operation: str, behavior: Behavior) -> Guarded:
        def guarded(request: object, context: grpc.ServicerContext, extra: Metadata) -> object:
            token = keys.bearer_token(_metadata(context, "authorization"))
            caller = self._keys.get(token) if keys.mode_of(token) else None
            if caller is None:
                raise LoyaltyError(Codigo.CLAVE_INVALIDA, "la clave no existe o fue revocada")
            # Known from here on, so that even a 429 or a 403 is logged with its key.
            reset = set_caller(caller)
            try:
                if self._limiter is not None:
                    cuota = self._limiter.take(caller.clave_id)
                    extra += [
                        (RATELIMIT_POLICY_KEY, cuota.policy_header()),
                        (RATELIMIT_KEY, cuota.header()),
                    ]
                    if not cuota.admitida:
                        raise LoyaltyError(
                            Codigo.DEMASIADAS_LLAMADAS,
                            f"más de {cuota.limit} llamadas en 60 s con esta clave; "
                            f"reintente en {cuota.retry_after} s",
                            retry_after=cuota.retry_after,
                        )
                permissions.check(operation, caller.permisos)
                response = behavior(request, context)
            finally:
                reset_caller(reset)
            # A client that already went away (cancelled, deadline) gets nothing more.
            if extra and context.is_active():
                context.send_initial_metadata(tuple(extra))
            return response

        return guarded

    def _backoffice(self, behavior: Behavior) -> Guarded:
        def guarded(request: object, context: grpc.ServicerContext, _: Metadata) -> object:
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


def _mapping_errors(behavior: Guarded, method: str) -> Behavior:
    def mapped(request: object, context: grpc.ServicerContext) -> object:
        extra: Metadata = []
        try:
            return behavior(request, context, extra)
        except LoyaltyError as error:
            failure = error
        except _BAD_VALUE:
            # PostgreSQL refused a value; a NUL character is the one the rules of each
            # field leave to it (api/requests.reject_nul names the field).
            failure = _nul_error(request) or _internal(method)
        except _UNAVAILABLE:
            log.warning("database unavailable during %s", method, exc_info=True)
            failure = LoyaltyError(
                Codigo.SERVICIO_NO_DISPONIBLE, "la base de datos no responde; reintente"
            )
        except Exception:
            failure = _internal(method)
        for_gateway = _metadata(context, GATEWAY_MARK_KEY) == GATEWAY_MARK_VALUE
        context.abort_with_status(to_grpc_status(failure, tuple(extra), for_gateway=for_gateway))
        raise AssertionError("unreachable: abort_with_status raises")

    return mapped


def _internal(method: str) -> LoyaltyError:
    """error_interno for the exception being handled, logged whole (not sent)."""
    log.exception("unexpected error in %s", method)
    return LoyaltyError(Codigo.ERROR_INTERNO, "")


def _nul_error(request: object) -> LoyaltyError | None:
    if not isinstance(request, Message):
        return None
    try:
        reject_nul(request)
    except LoyaltyError as error:
        return error
    return None
