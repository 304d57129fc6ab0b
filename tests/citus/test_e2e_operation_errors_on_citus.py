"""tests/e2e/test_operation_errors.py on the cluster, through Envoy and the real server:
every operation's documented errors are the ones it answers. Tests and module fixtures
imported, not copied; `stack` and `http` are tests/e2e's on a distributed database
(tests/citus/conftest.py)."""

import pytest

from tests.e2e.test_operation_errors import (  # noqa: F401 (fixtures and tests collected here)
    keys,
    test_every_own_codigo_has_its_call,
    test_permiso_denegado_where_a_permission_is_needed,
    test_register_tx_answers_id_externo_en_conflicto,
    test_the_operation_answers_its_own_codigo,
)

pytestmark = pytest.mark.e2e
