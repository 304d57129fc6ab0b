"""tests/integration/test_codes_services.py on the cluster (bodies imported): the deposit
(its insert a function delegated inside the unit of work, after the promotion's FOR SHARE),
its counts under concurrency, its wait for a concurrent end of the promotion, the listing
and the assignment."""

from tests.integration.test_codes_services import (  # noqa: F401 (collected here)
    _programs,
    statements,
    test_assign_next_failures,
    test_assign_next_skips_a_locked_code_without_waiting,
    test_assign_next_takes_the_oldest_disponible,
    test_concurrent_assign_next_gives_distinct_codes,
    test_concurrent_overlapping_deposits_count_each_code_once,
    test_deposit_counts_and_inventory,
    test_deposit_failures_change_nothing,
    test_deposit_waits_for_a_concurrent_end_of_the_promotion,
    test_listing_is_one_statement_with_every_state,
    test_numeric_name_is_found_when_no_promotion_has_that_id,
)
