"""A database that accepts the connection but never answers (a frozen host, a black hole
behind a load balancer) fails a call after CONNECT_TIMEOUT_SECONDS instead of hanging until
TCP gives up, and a URL's own `connect_timeout` wins."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from loyalty_grpc.store.db import CONNECT_TIMEOUT_SECONDS, make_engine


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose connections the kernel accepts and nobody ever answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


@pytest.mark.parametrize(
    ("query", "bound"), [("", CONNECT_TIMEOUT_SECONDS), ("?connect_timeout=1", 1)]
)
def test_a_silent_database_fails_fast(silent_port: int, query: str, bound: int):
    engine = make_engine(f"postgresql://u:p@127.0.0.1:{silent_port}/db{query}", pool_size=1)
    started = time.monotonic()
    try:
        with pytest.raises(OperationalError), engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    finally:
        engine.dispose()
    took = time.monotonic() - started
    assert bound - 0.5 <= took < bound + 2.5, took
