"""The wallet sender's failure handling of tests/integration/test_wallet_sender_failures.py
on the cluster (their bodies imported, not copied). Not the two that break the database
under the sender (a table renamed, connections refused): on the cluster their breakage
reaches the workers too and the errors differ (e.g. "database … does not exist" from a
worker), which those tests do not expect; left for later."""

from tests.integration.test_wallet_sender_failures import (  # noqa: F401 (fixtures and tests collected here)
    admin,
    new_fan,
    programa,
    sender_engine,
    server_admin,
    test_a_database_error_in_one_line_never_quotes_data,
    test_a_failing_batch_provider_logs_one_traceback_then_a_line_a_minute,
)
