"""The wallet sender's failure handling of tests/integration/test_wallet_sender_failures.py
on the cluster (their bodies imported, not copied)."""

from tests.integration.test_wallet_sender_failures import (  # noqa: F401 (fixtures and tests collected here)
    admin,
    new_fan,
    programa,
    sender_engine,
    server_admin,
    test_a_database_error_in_one_line_never_quotes_data,
    test_a_database_refusing_connections_fails_runs_quietly_until_it_is_back,
    test_a_failing_batch_provider_logs_one_traceback_then_a_line_a_minute,
    test_a_missing_table_fails_runs_quietly_until_it_is_back,
)
