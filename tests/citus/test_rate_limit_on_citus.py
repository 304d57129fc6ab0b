"""The call limit's guarantees of tests/integration/test_rate_limit.py, on the cluster
(their bodies imported, not copied): the request and the settlement equal the pure model
(domain/rate_limit.py) call by call, through `loyalty_limit_reserve`/`loyalty_limit_settle`
delegated to the key's shard; settlements in opposite key orders never deadlock; the purge;
two limiters in threads never pass the limit; two `loyalty serve` processes on the
coordinator share one limit, exactly, with calls at once on both."""

from tests.integration.test_rate_limit import (  # noqa: F401 (fixtures and tests collected here)
    calls_per_minute,
    key_ids,
    servers,
    test_concurrent_calls_on_both_processes_admit_exactly_the_limit,
    test_db_now_is_the_database_clock_within_the_second,
    test_every_authenticated_call_counts,
    test_idle_rows_are_purged,
    test_one_statement_settles_many_keys,
    test_settlements_in_opposite_key_orders_never_deadlock,
    test_the_statement_equals_the_model,
    test_the_table_is_unlogged,
    test_two_limiters_in_threads_never_pass_the_limit,
    test_two_processes_share_one_limit,
)
