"""tests/integration/test_redeem_concurrency.py on the cluster (bodies imported): twenty
concurrent redemptions of one code credit once, a batch racing single redemptions credits
each code once, overlapping batches never deadlock, a batch failing half-way leaves
nothing. The single form is one delegated call; a batch is `lock_copies`, then the
redemption's function delegated inside the transaction (force_delegation), then
`credited_by_redemptions`: one program, one node, one-phase commit."""

from tests.integration.test_redeem_concurrency import (  # noqa: F401 (collected here)
    caller,
    engine,
    test_a_batch_racing_single_redemptions_credits_each_code_once,
    test_a_batch_that_fails_half_way_leaves_nothing,
    test_batches_over_different_codes_of_the_same_fans_never_deadlock,
    test_overlapping_batches_in_different_orders_never_deadlock,
    test_twenty_concurrent_redemptions_of_one_code_credit_once,
)
