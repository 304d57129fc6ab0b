"""tests/e2e/test_rate_limit_http.py on the cluster: the call limit through Envoy, with
its own small-limit server on a distributed database (429 and its headers, per key).
Tests and module fixtures imported, not copied; `create_database` is the cluster's
(tests/citus/conftest.py)."""

import pytest

from tests.e2e.test_rate_limit_http import (  # noqa: F401 (fixtures and tests collected here)
    http,
    limited,
    test_an_ordinary_error_carries_the_ratelimit_fields,
    test_over_the_limit_is_429_with_retry_after,
    test_success_carries_the_ratelimit_fields,
    test_unknown_key_gets_no_ratelimit_fields,
)

pytestmark = pytest.mark.e2e
