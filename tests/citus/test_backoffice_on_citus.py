"""The back office's use cases of tests/integration/test_backoffice_services.py on the
cluster (all of them, bodies imported, not copied): programs, keys, fans, promotions and
codes through their services on a database `loyalty migrate` distributed; concurrent
registrations and assignments, and a race past a pre-check refused by the unique index
(on Citus a shard's copy of it, store/integrity.py)."""

from tests.integration.test_backoffice_services import (  # noqa: F401 (fixtures and tests collected here)
    _programs,
    promo,
    test_a_failing_use_case_rolls_back_the_ones_before_it,
    test_assign_then_release,
    test_authenticate_unknown_or_malformed,
    test_baja_and_reactivation,
    test_canjeado_is_final_for_the_back_office,
    test_code_errors,
    test_concurrent_assign_of_one_code,
    test_concurrent_registration_same_email,
    test_create_and_update_promo,
    test_create_promo_with_estado,
    test_find_taken_checks_a_batch_in_one_query,
    test_get_not_found,
    test_issue_authenticate_revoke,
    test_issue_key_invalid,
    test_key_not_found,
    test_nothing_left_half_done,
    test_promo_errors,
    test_race_past_the_pre_check_is_translated,
    test_register_and_get,
    test_register_duplicates,
    test_register_in_unknown_program,
    test_register_invalid,
    test_register_with_qr_token,
    test_release_disponible,
    test_test_key_and_listing,
    test_update_duplicates_and_errors,
    test_update_only_given_fields,
    test_upsert_program_creates_then_updates,
    test_upsert_program_invalid,
    test_use_cases_compose_in_one_unit_of_work,
)
