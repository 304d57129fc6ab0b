"""tests/reliability/test_under_load.py on the cluster: `loyalty up --workers 2` on a
distributed database, a retry storm, then a worker and Envoy SIGKILLed in the middle of a
load of 8 retrying POS clients (sales and redemptions, each a call Citus delegates to the
node of the program's shard); each test ends in the exact audit: every acknowledged sale
and redemption once, balances equal to the ledger. Tests and fixtures imported, not
copied. Left out: `test_calls_cut_by_a_worker_kill_get_the_envelope` (what Envoy answers
for a call a kill cut, the database incidental; 40–80 s on 2 cores)."""

from tests.reliability.conftest import journal, stack  # noqa: F401 (fixtures)
from tests.reliability.test_under_load import (  # noqa: F401 (collected here)
    test_envoy_sigkilled_mid_load,
    test_retry_storm,
    test_worker_sigkilled_mid_load,
)
