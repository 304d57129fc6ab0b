"""tests/e2e/test_request_id.py on the cluster: the request id from Envoy through the
server's log to the answer, on calls that reach the database. Tests and module fixtures
imported, not copied; `stack` is tests/e2e's on a distributed database
(tests/citus/conftest.py).

Left out, Envoy's alone: its access log without the cursor nor the key (10 s of the
module's time on 2 cores) and its stats in Prometheus' format."""

import pytest

from tests.e2e.test_request_id import (  # noqa: F401 (fixtures and tests collected here)
    captured,
    client,
    gateway,
    keys,
    test_a_client_cannot_choose_the_request_id,
    test_errors_and_envoy_replies_have_one_too,
    test_ping_has_a_request_id_that_the_server_logged,
)

pytestmark = pytest.mark.e2e
