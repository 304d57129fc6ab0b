"""tests/e2e/test_roster.py on the cluster, through Envoy and the real server: the
snapshot in pages, the changes after it (sale, profile edit, registration, adjustment,
void, baja, reactivation), both parameter locations, `limite`, cursor errors and program
isolation, the integrator's mirror always equal to the database. Tests and module fixtures
imported, not copied; `stack` and `http` are tests/e2e's on a distributed database
(tests/citus/conftest.py)."""

import pytest

from tests.e2e.test_roster import (  # noqa: F401 (fixtures and tests collected here)
    big_keys,
    keys,
    other_keys,
    test_body_not_json,
    test_both_parameter_locations,
    test_changes_after_the_snapshot,
    test_cursor_errors,
    test_cursor_is_bound_to_the_program_not_the_key,
    test_desde_of_wrong_json_type,
    test_exact_json_shape,
    test_limite_below_one_or_not_integer_get,
    test_limite_below_one_or_wrong_type_post,
    test_limite_default_and_maximum,
    test_many_changes_page_in_order_once_per_page,
    test_permission,
    test_program_isolation,
    test_snapshot_in_one_page_and_exact_multiple,
    test_snapshot_pages_every_fan,
    test_snapshot_sees_changes_made_while_paging,
)

pytestmark = pytest.mark.e2e
