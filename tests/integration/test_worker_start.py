"""A worker that cannot get to serving at start-up ends the pool with its one-line reason
(runtime/process/supervision.py: the only case where supervision gives up)."""

from __future__ import annotations

import psutil  # type: ignore[import-untyped]
import pytest

from loyalty_grpc.api.server import ServerSettings
from loyalty_grpc.runtime.process.workers import WorkerError, WorkerPool


def test_a_worker_that_cannot_build_its_server_ends_the_pool_with_the_reason():
    # No worker thread: grpc's thread pool refuses it while the worker builds its server.
    settings = ServerSettings(
        database_url="postgresql://u:p@127.0.0.1:1/db", admin_token="t", port=0, max_workers=0
    )
    pool = WorkerPool(settings, 2)
    with pytest.raises(WorkerError) as raised:
        pool.start()
    message = str(raised.value)
    assert message.startswith("worker ")
    assert "could not start: max_workers must be greater than 0" in message
    assert "\n" not in message
    assert pool.pids == []
    assert not [
        p
        for p in psutil.Process().children()
        if "loyalty_grpc.runtime.process.worker" in " ".join(p.cmdline())
    ]
