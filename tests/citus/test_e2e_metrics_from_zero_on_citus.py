"""tests/e2e/test_metrics_from_zero.py on the cluster: a fresh `serve --workers 2`
on a distributed database exposes every counter and histogram at 0, every known label
value, its workers' pool series, and a valid exposition. Tests and module fixtures
imported, not copied; `create_database` is the cluster's (tests/citus/conftest.py)."""

import pytest

from tests.e2e.test_metrics_from_zero import (  # noqa: F401 (fixtures and tests collected here)
    exposition,
    test_every_registered_counter_and_histogram_is_there_at_zero,
    test_labelled_counters_start_with_every_known_label_value,
    test_pool_series_of_the_workers,
    test_the_exposition_is_valid,
)

pytestmark = pytest.mark.e2e
