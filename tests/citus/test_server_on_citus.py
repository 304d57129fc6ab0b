"""A real gRPC server on the cluster's coordinator, the guarantees of tests/integration's
server modules, bodies imported: test_grpc_server (graceful stop, restarts, both
services), test_python_client, test_failed_key_checks, test_error_metadata,
test_sale_finds_the_resolved_fan, test_autocommit (a lost connection leaves the pool),
test_node_example (skipped without node)."""

from tests.integration.conftest import (  # noqa: F401 (fixtures collected here)
    channel,
    server,
)
from tests.integration.test_autocommit import (  # noqa: F401 (fixtures and tests collected here)
    one_connection,
    test_a_lost_connection_is_503_then_the_next_call_works,
    test_a_lost_connection_leaves_the_pool,
    test_a_server_that_went_away_takes_every_older_connection_with_it,
    test_an_explicit_transaction_left_open_is_rolled_back,
    test_the_connection_goes_back_to_the_pool_transactional,
)
from tests.integration.test_error_metadata import (  # noqa: F401 (fixtures and tests collected here)
    key,
    stub,
    test_a_native_error_has_its_status_and_errorinfo_but_no_envelope,
    test_a_success_carries_no_gateway_metadata_either_way,
    test_backoffice_errors_follow_the_mark_too,
    test_only_the_marks_exact_value_counts,
    test_refusals_before_the_key_is_known_follow_the_mark,
    test_the_same_error_with_the_mark_has_the_envelope,
)
from tests.integration.test_failed_key_checks import (  # noqa: F401 (fixtures and tests collected here)
    edge,
    test_a_flood_reaches_the_database_at_most_limit_times,
    test_a_key_that_worked_keeps_working_during_the_flood,
    test_another_address_is_not_affected,
    test_lookups_resume_when_the_window_passes,
    test_native_callers_are_their_peer_and_get_no_verdict,
    test_the_key_cache_keeps_the_valid_keys_under_a_flood_of_misses,
)
from tests.integration.test_grpc_server import (  # noqa: F401 (fixtures and tests collected here)
    admin,
    pos_stub,
    server_settings,
    test_authentication_errors,
    test_backoffice_requires_admin_token,
    test_backoffice_states_modes_and_times,
    test_database_down_is_service_unavailable,
    test_error_carries_http_envelope_metadata_for_the_gateway,
    test_graceful_stop_finishes_in_flight_calls,
    test_health_serving,
    test_permission_denied_then_the_operation,
    test_ping_with_live_and_test_keys,
    test_pos_key_does_not_open_backoffice,
    test_reflection_lists_services,
    test_reflection_v1_lists_and_describes_services,
    test_revoked_key_is_refused,
)
from tests.integration.test_node_example import (  # noqa: F401 (fixtures and tests collected here)
    test_node_example_against_the_server,
)
from tests.integration.test_python_client import (  # noqa: F401 (fixtures and tests collected here)
    demo,
    pos,
    sleeps,
    test_a_call_retries_through_a_server_restart,
    test_a_failure_is_one_exception_with_the_error_info_and_is_not_retried,
    test_mutual_tls,
    test_ping,
    test_promos_codes_and_roster,
    test_rate_limit_retry_info_is_honoured,
    test_redeem_single_and_batch,
    test_register_sale_with_typed_amounts_and_time,
    test_resolve_fan_with_and_without_a_promotion,
)
from tests.integration.test_sale_finds_the_resolved_fan import (  # noqa: F401 (fixtures and tests collected here)
    program,
    test_the_cases_reach_every_reading,
    test_the_sale_credits_the_fan_resolve_shows,
)
