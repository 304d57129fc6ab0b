"""Fixtures (`loyalty admin apply`, tests/integration/test_fixture_apply.py) on the cluster,
all of them, bodies imported: the design's example and the demo applied, applied again
changing nothing, every refusal changing nothing."""

from tests.integration.test_fixture_apply import (  # noqa: F401 (fixtures and tests collected here)
    test_a_weak_key_already_stored_keeps_working,
    test_a_weak_new_key_is_clave_mal_formada_and_changes_nothing,
    test_apply_twice_changes_nothing_at_all,
    test_baja_keeps_its_moment_and_codes_keep_theirs,
    test_changed_fixture_updates_exactly_the_changed_rows,
    test_code_fan_nowhere_is_refused_and_changes_nothing,
    test_code_may_name_a_fan_already_in_the_database,
    test_demo_fixture_applies,
    test_design_example_applies_and_creates_everything,
    test_email_of_another_fan_is_correo_duplicado_and_changes_nothing,
    test_key_of_another_program_is_refused_without_echoing_it,
    test_many_fans_and_codes,
    test_qr_token_of_another_fan_is_qr_duplicado_and_changes_nothing,
    test_validation_failure_changes_nothing,
)
