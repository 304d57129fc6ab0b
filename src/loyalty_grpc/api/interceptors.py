"""The edge of every RPC: one gRPC interceptor that runs, per call, these steps in this
order, each with one job and its own module:

1. failures (api/failures.py) wraps everything below: whatever a step or the method
   raises becomes the call's answer (a status with ErrorInfo; the envelope metadata only
   for calls through the gateway);
2. authentication (api/authentication.py): a POS call's bearer key -> its Caller (keys
   that fail are limited per client address: api/failed_checks.py); a back-office call's
   admin token;
3. the caller is known from here on (api/context.py), so that even a 429 or a 403 is
   logged with its key (api/observability.py listens);
4. the call limit (api/call_limit.py), POS calls only: over it, demasiadas_llamadas; the
   RateLimit metadata goes out with the answer, whatever it is;
5. permissions (domain/permissions.py): the operation must be one the key may call;
6. the method itself.

One interceptor rather than one per step: a gRPC interceptor costs every call a
handler lookup and a wrapper, and a cashier waits for every call. Handlers are built once
per method.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc

from loyalty_grpc.api.authentication import AdminToken, PosKeys
from loyalty_grpc.api.call_limit import admit
from loyalty_grpc.api.call_metadata import Metadata
from loyalty_grpc.api.context import reset_caller, set_caller
from loyalty_grpc.api.failed_checks import FailedChecks
from loyalty_grpc.api.failures import abort, failure_of
from loyalty_grpc.api.key_cache import KeyCache
from loyalty_grpc.api.response_metadata import send_with_response
from loyalty_grpc.domain import permissions
from loyalty_grpc.services.rate_limit import RateLimiter

POS_SERVICE = "loyalty.v1.PosService"
BACKOFFICE_SERVICE = "loyalty.v1.BackofficeService"

Behavior = Callable[[object, grpc.ServicerContext], object]
# A guarded behaviour also gets the call's list of extra metadata (sent with the answer).
Guarded = Callable[[object, grpc.ServicerContext, Metadata], object]
if TYPE_CHECKING:  # grpc-stubs make it generic; the runtime class is not subscriptable
    Handler = grpc.RpcMethodHandler[object, object]


class EdgeInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    def __init__(
        self,
        keys_cache: KeyCache,
        admin_token: str,
        limiter: RateLimiter | None = None,
        failed_checks: FailedChecks | None = None,
    ) -> None:
        self._pos_keys = PosKeys(keys_cache, failed_checks)
        self._admin = AdminToken(admin_token)
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
            _answering_failures(guarded, method),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
        return self._handlers[method]

    def _pos(self, operation: str, behavior: Behavior) -> Guarded:
        def guarded(request: object, context: grpc.ServicerContext, extra: Metadata) -> object:
            caller = self._pos_keys.caller(context, extra)
            reset = set_caller(caller)
            try:
                if self._limiter is not None:
                    admit(self._limiter, caller, extra)
                permissions.check(operation, caller.permisos)
                response = behavior(request, context)
            finally:
                reset_caller(reset)
            # A client that already went away (cancelled, deadline) gets nothing more.
            if extra and context.is_active():
                send_with_response(context, extra)
            return response

        return guarded

    def _backoffice(self, behavior: Behavior) -> Guarded:
        def guarded(request: object, context: grpc.ServicerContext, _: Metadata) -> object:
            self._admin.check(context)
            return behavior(request, context)

        return guarded


def _answering_failures(behavior: Guarded, method: str) -> Behavior:
    def answered(request: object, context: grpc.ServicerContext) -> object:
        extra: Metadata = []
        try:
            return behavior(request, context, extra)
        except Exception as error:
            failure = failure_of(error, request, method)
        return abort(context, failure, extra)

    return answered
