"""The authenticated caller of the current RPC, set by the interceptor for the servicer."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

from loyalty_grpc.domain.caller import Caller

_caller: ContextVar[Caller | None] = ContextVar("loyalty_caller", default=None)
# Told the caller once it is known (api/observability.py: the program and key id on the
# call's log line) without the interceptor that sets it knowing who listens.
_listener: ContextVar[Callable[[Caller], None] | None] = ContextVar(
    "loyalty_caller_listener", default=None
)


def current_caller() -> Caller:
    caller = _caller.get()
    if caller is None:
        raise RuntimeError("no authenticated caller: the POS interceptor did not run")
    return caller


def set_caller(caller: Caller | None) -> object:
    listener = _listener.get()
    if caller is not None and listener is not None:
        listener(caller)
    return _caller.set(caller)


def reset_caller(token: object) -> None:
    _caller.reset(token)  # type: ignore[arg-type]


def listen_for_caller(listener: Callable[[Caller], None] | None) -> object:
    """Call `listener` with the caller when `set_caller` sets one in this context."""
    return _listener.set(listener)


def stop_listening(token: object) -> None:
    _listener.reset(token)  # type: ignore[arg-type]
