"""tests/e2e/test_promos_codes.py on the cluster, through Envoy and the real server:
promotions with their inventory, the codes deposit (five thousand in one call, repeats,
another program's promotion refused) and the back office's assign and release. Tests and
module fixtures imported, not copied; `stack` and `http` are tests/e2e's on a distributed
database (tests/citus/conftest.py)."""

import pytest

from tests.e2e.test_promos_codes import (  # noqa: F401 (fixtures and tests collected here)
    keys,
    other_keys,
    test_a_pausada_promotion_takes_codes,
    test_a_test_key_deposits_too,
    test_aliases,
    test_authentication,
    test_body_that_is_not_json,
    test_deposit_response_shape_and_json_types,
    test_errors_change_nothing,
    test_five_thousand_and_one_adds_nothing,
    test_five_thousand_codes_in_one_call,
    test_invalid_codes_are_named_first_three_and_nothing_is_added,
    test_inventory_follows_back_office_assign_and_release,
    test_pasted_text_is_split_normalised_and_deduplicated,
    test_permission,
    test_program_isolation,
    test_promo_by_id_or_by_name,
    test_promos_lists_every_promotion_with_its_inventory,
    test_resend_adds_nothing_and_overlaps_count_as_duplicates,
)

pytestmark = pytest.mark.e2e
