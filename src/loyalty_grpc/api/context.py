"""The authenticated caller of the current RPC, set by the interceptor for the servicer."""

from __future__ import annotations

from contextvars import ContextVar

from loyalty_grpc.domain.caller import Caller

_caller: ContextVar[Caller | None] = ContextVar("loyalty_caller", default=None)


def current_caller() -> Caller:
    caller = _caller.get()
    if caller is None:
        raise RuntimeError("no authenticated caller: the POS interceptor did not run")
    return caller


def set_caller(caller: Caller | None) -> object:
    return _caller.set(caller)


def reset_caller(token: object) -> None:
    _caller.reset(token)  # type: ignore[arg-type]
