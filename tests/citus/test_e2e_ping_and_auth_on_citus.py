"""tests/e2e/test_ping_and_auth.py on the cluster, through Envoy and the real server: ping
and the key check (permissions, test keys, revoked, unknown and malformed keys). Tests
imported, not copied; `stack` and `http` are tests/e2e's on a distributed database
(tests/citus/conftest.py)."""

import pytest

from tests.e2e.test_ping_and_auth import (  # noqa: F401 (fixtures and tests collected here)
    test_authentication_errors,
    test_backoffice_not_reachable_by_grpc_through_envoy,
    test_exact_error_bytes,
    test_get_ping_has_fewer_fields,
    test_malformed_json_and_wrong_types,
    test_oversized_body,
    test_permission_denied,
    test_post_ping_accepts_an_empty_json_body,
    test_post_ping_live_key,
    test_revoked_key_is_refused,
    test_test_key_is_prueba,
    test_tx_only_key_cannot_resolve,
    test_unknown_path_and_method,
)

pytestmark = pytest.mark.e2e
