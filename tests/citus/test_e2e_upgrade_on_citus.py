"""tests/e2e/test_upgrade.py on the cluster: an upgrade (a new `serve` sharing the port, the
old one stopped) and a crash fail no sale through Envoy, every sale answered recorded once
with the exact balance (sales_load.audit) on a distributed database; a second `serve`
never shares a data dir. Tests imported, not copied; `migrated_database` is tests/e2e's on
the cluster (tests/citus/conftest.py)."""

import pytest

from tests.e2e.test_upgrade import (  # noqa: F401 (fixtures and tests collected here)
    test_a_second_serve_never_shares_a_data_dir,
    test_upgrade_and_crash_fail_no_call,
)

pytestmark = pytest.mark.e2e
