"""The contract's limit, 600 calls a minute, exact on the cluster: two `loyalty serve`
processes on the coordinator, 16 threads, 2,400 pings of one key at once, exactly 600 admitted
(the body of tests/integration/test_rate_limit.py's concurrent test, imported). At 600 a
process reserves batches of spare calls (the slack is 8), so this also proves that batches
and their settlements, counted on the key's shard with that node's clock, never let one
call too many through nor refuse one too early."""

import pytest

from tests.integration.test_rate_limit import (  # noqa: F401 (fixtures and tests collected here)
    servers,
    test_concurrent_calls_on_both_processes_admit_exactly_the_limit,
)


@pytest.fixture(scope="module")
def calls_per_minute() -> int:
    return 600
