"""tests/e2e/test_gateway_restart.py on the cluster: the gateway restarted (a reloaded
folder outliving the restart, a changed start command winning) fails no call to the
stack's server on a distributed database. Tests and module fixtures imported, not copied;
`stack` is tests/e2e's on the cluster (tests/citus/conftest.py)."""

import pytest

from tests.e2e.test_gateway_restart import (  # noqa: F401 (fixtures and tests collected here)
    key,
    test_a_changed_start_command_wins_over_an_earlier_reload,
    test_a_reloaded_folder_outlives_a_restart,
)

pytestmark = pytest.mark.e2e
