"""tests/e2e/test_nul_characters.py on the cluster, through Envoy and the real server: a
NUL character in any text the POS sends, which PostgreSQL text cannot hold (each shard
neither), is refused, never a 500, and changes nothing. Tests and module fixtures
imported, not copied; `stack` and `http` are tests/e2e's on a distributed database
(tests/citus/conftest.py)."""

import pytest

from tests.e2e.test_nul_characters import (  # noqa: F401 (fixtures and tests collected here)
    key,
    test_a_nul_character_is_refused,
    test_a_nul_in_the_roster_query_string,
    test_the_valid_requests_are_valid,
)

pytestmark = pytest.mark.e2e
