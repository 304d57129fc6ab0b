"""Observability of a real server on the cluster (tests/integration/test_observability.py,
all of it, bodies imported): counters, latency, pool gauges, the request id, the log line,
/metrics, an unreachable database."""

from tests.integration.conftest import (  # noqa: F401 (fixtures collected here)
    channel,
    server,
)
from tests.integration.test_observability import (  # noqa: F401 (fixtures and tests collected here)
    captured,
    clave_id,
    server_settings,
    stub,
    test_counters_move_per_method_and_codigo,
    test_errors_carry_the_request_id_and_keep_their_status,
    test_histogram_buckets_are_cumulative,
    test_metrics_endpoint_aggregates_worker_processes,
    test_metrics_endpoint_in_one_process,
    test_metrics_endpoint_reports_an_unreachable_database,
    test_one_json_line_per_call_without_personal_data,
    test_pool_series_are_summed_over_live_workers,
    test_pool_series_describe_the_servers_pool,
    test_pool_series_while_calls_hold_connections,
    test_the_request_id_comes_back_and_is_logged,
)
