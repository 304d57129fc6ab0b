"""tests/e2e/test_resolve.py on the cluster, through Envoy and the real server: the fan in
every form and alias, not found, permissions, bad requests, and a resolve changing
nothing. Tests and module fixtures imported, not copied; `stack` and `http` are
tests/e2e's on a distributed database (tests/citus/conftest.py)."""

import pytest

from tests.e2e.test_resolve import (  # noqa: F401 (fixtures and tests collected here)
    keys,
    test_bad_requests,
    test_fan_fields_and_exact_null_promo,
    test_forms_and_aliases,
    test_not_found,
    test_permission,
    test_resolve_changes_nothing,
)

pytestmark = pytest.mark.e2e
