"""tests/e2e/test_rate_limit_workers.py on the cluster: the call limit exact across
`serve`'s workers sharing a port, on a distributed database (a burst refused only after
590, a key idle and back on another worker not refused early). Tests and module fixtures
imported, not copied; `create_database` is the cluster's (tests/citus/conftest.py)."""

import pytest

from tests.e2e.test_rate_limit_workers import (  # noqa: F401 (fixtures and tests collected here)
    served,
    test_a_burst_then_one_at_a_time_is_refused_only_after_590,
    test_a_key_idle_and_back_on_another_worker_is_not_refused_early,
)

pytestmark = pytest.mark.e2e
