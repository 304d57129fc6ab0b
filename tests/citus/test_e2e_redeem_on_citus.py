"""tests/e2e/test_redeem.py on the cluster, through Envoy and the real server: single
and batch redemptions, their retries, concurrent redemptions of one code credited once,
test keys, limits and refusals that change nothing. Tests and module fixtures imported,
not copied; `stack` and `http` are tests/e2e's on a distributed database
(tests/citus/conftest.py)."""

import pytest

from tests.e2e.test_redeem import (  # noqa: F401 (fixtures and tests collected here)
    keys,
    test_a_list_too_long_for_one_code_points_to_codigos,
    test_a_string_in_codigos_is_refused,
    test_a_text_that_is_not_a_list_gets_no_hint,
    test_already_redeemed_in_the_fixture,
    test_any_case_and_surrounding_spaces,
    test_batch_answers_each_code_as_the_single_form_would,
    test_batch_entry_fields,
    test_batch_limit,
    test_batch_repeats_a_text_in_several_promotions,
    test_batch_without_fan_leer_and_with_a_test_key,
    test_correo_only_with_fan_leer,
    test_no_other_condition_applies,
    test_one_text_in_several_promotions,
    test_permission,
    test_redeem_credits_records_and_then_is_a_duplicate,
    test_request_errors_redeem_nothing,
    test_several_codes_in_one_text_point_to_codigos,
    test_single_and_batch_over_native_grpc_leave_the_other_form_unset,
    test_state_errors_change_nothing,
    test_test_key_redeems_without_points,
    test_ts_formats_and_caja_alias,
    test_twenty_concurrent_redemptions_credit_once,
    test_without_ts_or_terminal_the_server_time_is_recorded,
)

pytestmark = pytest.mark.e2e
