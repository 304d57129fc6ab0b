"""Initial metadata that leaves with the response, in the same batch.

grpc's synchronous server sends `context.send_initial_metadata(...)` at once, as a batch
of its own: one more completion for its polling thread to hand back, one more HEADERS
frame written, and one more read for Envoy, on every call that has response metadata (the
RateLimit fields of every authenticated POS call: api/call_limit.py). Measured with
bench/floor.py, that batch was the largest single cost of the edge (docs/performance.md).
A call that sends none gets its (empty) initial metadata in the batch that carries the
response and the status. `send_with_response` puts the call's initial metadata there
instead: grpc (the pinned 1.85, `grpc._server`) builds that batch's initial metadata with
`_get_initial_metadata(state, None)`; the hook installed here answers it with what the
call left in its state.

It reaches into grpc's private module, so it checks what it relies on when imported; if
anything differs (another grpc version), `INSTALLED` is False, the metadata is sent as
before (`send_initial_metadata`, correct and slower), and a warning says so.
tests/integration/test_response_metadata.py checks that it is installed and what a caller
receives.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import grpc
from grpc import _server
from grpc._typing import MetadataType

log = logging.getLogger(__name__)

Metadata = Sequence[tuple[str, str]]

# The attribute a call's grpc state carries until its response is sent.
_PENDING = "loyalty_initial_metadata"


def _install() -> bool:
    original = getattr(_server, "_get_initial_metadata", None)
    state_class = getattr(_server, "_RPCState", None)
    if original is None or state_class is None or not hasattr(_server, "_Context"):
        return False
    state = state_class()
    if not hasattr(state, "initial_metadata_allowed") or not hasattr(state, "condition"):
        return False

    def initial_metadata(
        state: _server._RPCState, metadata: MetadataType | None
    ) -> MetadataType | None:
        if metadata is None:
            metadata = getattr(state, _PENDING, None)
        return original(state, metadata)  # type: ignore[no-any-return]

    _server._get_initial_metadata = initial_metadata
    return True


INSTALLED = _install()
if not INSTALLED:
    log.warning(
        "grpc %s: initial metadata goes out in a batch of its own (slower); "
        "see api/response_metadata.py",
        grpc.__version__,
    )


def send_with_response(context: grpc.ServicerContext, metadata: Metadata) -> None:
    """Send `metadata` as the call's initial metadata together with its response (a
    separate batch when that cannot be done). Call it once the response is known: nothing
    else may send initial metadata after it."""
    if INSTALLED and isinstance(context, _server._Context):
        state = context._state
        with state.condition:
            if state.initial_metadata_allowed:
                setattr(state, _PENDING, tuple(metadata))
                return
    context.send_initial_metadata(tuple(metadata))


__all__ = ["INSTALLED", "send_with_response"]
