"""api/response_metadata.py: initial metadata leaves with the response, in one batch, on a
real grpc server and channel (the RateLimit fields on a real server: test_rate_limit.py)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from typing import cast

import grpc
import pytest

from loyalty_grpc.api import response_metadata
from loyalty_grpc.api.response_metadata import send_with_response

FIELDS = (("ratelimit-policy", '"default";q=600;w=60'), ("ratelimit", '"default";r=599;t=60'))


def _echo(request: bytes, context: grpc.ServicerContext) -> bytes:
    send_with_response(context, FIELDS)
    # Nothing was sent yet: the metadata waits for the response's batch.
    still_allowed = context._state.initial_metadata_allowed  # type: ignore[attr-defined]
    return b"deferred" if still_allowed else b"sent apart"


def _then_fail(request: bytes, context: grpc.ServicerContext) -> bytes:
    context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no")


@pytest.fixture(scope="module")
def channel() -> Iterator[grpc.Channel]:
    handlers = {
        "Echo": grpc.unary_unary_rpc_method_handler(_echo),
        "Fail": grpc.unary_unary_rpc_method_handler(_then_fail),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.T", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield channel
    server.stop(None).wait()


def test_the_hook_is_installed_on_the_pinned_grpc() -> None:
    """Fails on a grpc whose private module changed: the metadata would still be sent, in
    a batch of its own (slower); look at api/response_metadata.py again."""
    assert response_metadata.INSTALLED, grpc.__version__


def test_the_metadata_arrives_with_the_response(channel: grpc.Channel) -> None:
    echo = channel.unary_unary("/t.T/Echo", None, None)
    response, call = echo.with_call(b"")
    assert response == b"deferred"
    assert dict(call.initial_metadata())["ratelimit"] == '"default";r=599;t=60'
    assert dict(call.initial_metadata())["ratelimit-policy"] == '"default";q=600;w=60'


def test_calls_without_it_send_no_such_metadata(channel: grpc.Channel) -> None:
    """The pending metadata belongs to its call's state, not to the next call's."""
    echo = channel.unary_unary("/t.T/Echo", None, None)
    echo.with_call(b"")
    with pytest.raises(grpc.RpcError) as caught:
        channel.unary_unary("/t.T/Fail", None, None)(b"")
    failed = cast(grpc.Call, caught.value)
    assert failed.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "ratelimit" not in dict(failed.initial_metadata() or ())
