"""tests/e2e/test_status_workers.py on the cluster: `serve`'s workers on one port against a
distributed database, their rolling stop failing no call (native gRPC and through a real
Envoy), and `loyalty status` reading a healthy cluster database and an unmigrated one. The
tests and the module's fixture imported, not copied; `create_database` is the cluster's
(tests/citus/conftest.py).

Left out, no database of the cluster in them: `status` with no server running, of a
killed supervisor, and of `up`'s own embedded database; a port in use refused before any
worker starts (it never reaches the database)."""

import pytest

from tests.e2e.test_status_workers import (  # noqa: F401 (fixtures and tests collected here)
    served,
    test_a_dead_worker_is_replaced,
    test_rolling_stop_fails_no_call_through_envoy,
    test_rolling_stop_fails_no_native_call,
    test_serve_runs_workers_that_share_the_port,
    test_status_of_a_healthy_server,
    test_status_says_unhealthy,
)

pytestmark = pytest.mark.e2e
