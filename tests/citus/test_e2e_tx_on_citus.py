"""tests/e2e/test_tx.py on the cluster, through Envoy and the real server: the sale's
answers over HTTP and native gRPC, its retries and replays, conflicting reuses of an
`id_externo`, fifty identical sales at once credited once, voids, amounts in every format,
test keys and the wallet pass a sale queues. Tests and module fixtures imported, not
copied; `stack` and `http` are tests/e2e's on a distributed database
(tests/citus/conftest.py)."""

import pytest

from tests.e2e.test_tx import (  # noqa: F401 (fixtures and tests collected here)
    cents_keys,
    keys,
    test_a_retry_over_native_grpc_and_http_says_what_the_sale_credited,
    test_a_sale_refreshes_the_wallet_pass_once_with_the_latest_balance,
    test_aliases_and_labels,
    test_amount_formats,
    test_conflicting_reuse_of_id_externo,
    test_correo_only_with_fan_leer,
    test_duplicate_replays_the_original,
    test_errors_change_nothing,
    test_fifty_concurrent_identical_calls_credit_once,
    test_permission,
    test_points_balance_and_response_shape,
    test_sale_without_ts_takes_server_time,
    test_test_key_credits_nothing_in_its_own_namespace,
    test_timestamp_formats,
)

pytestmark = pytest.mark.e2e
