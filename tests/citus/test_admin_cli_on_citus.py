"""`loyalty admin` (tests/integration/test_admin_cli*.py) and the back office's request ids
(test_backoffice_request_ids.py) on the cluster, all of them, bodies imported: a real
server on the distributed database, the command run in-process against it; a request
retried with its id is applied once."""

from tests.integration.conftest import (  # noqa: F401 (fixtures collected here)
    admin_cli,
    channel,
    server,
    server_settings,
)
from tests.integration.test_admin_cli import (  # noqa: F401 (fixtures and tests collected here)
    test_apply_fixture,
    test_errors_are_one_line_with_the_codigo,
    test_program_key_fan_promo_code_flow,
    test_token_from_the_data_dir,
)
from tests.integration.test_admin_cli_codes import (  # noqa: F401 (fixtures and tests collected here)
    club,
    test_a_failing_chunk_stops_the_import_and_running_again_resumes,
    test_empty_file_imports_nothing,
    test_import_from_stdin_with_progress_on_a_terminal,
    test_import_twice_second_adds_nothing,
    test_next_code,
    test_server_errors_say_what_was_saved,
)
from tests.integration.test_admin_cli_points import (  # noqa: F401 (fixtures and tests collected here)
    clave_id,
    test_adjust_ledger_void_flow,
    test_errors_are_one_line,
    test_ledger_of_a_fan_without_entries,
    test_out_of_range_numbers_are_usage_errors,
)
from tests.integration.test_backoffice_request_ids import (  # noqa: F401 (fixtures and tests collected here)
    md,
    promo_id,
    stub,
    test_a_failed_write_keeps_no_request_id,
    test_a_malformed_request_id_is_refused,
    test_adjust_points_retried_is_applied_once,
    test_assign_next_code_retried_delivers_one_code,
    test_identical_concurrent_calls_are_applied_once,
    test_the_cli_names_the_id_when_the_answer_is_lost,
    test_the_cli_sends_a_request_id_and_takes_one,
    test_the_same_id_with_another_request_is_refused,
    test_without_a_request_id_each_call_is_applied,
)
