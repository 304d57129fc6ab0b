"""Roster cursors bound to the database that issued them (tests/integration/
test_roster_cursors.py) and the roster's consistency cases (test_roster_consistency.py) on
the cluster, bodies imported. Not test_every_cursor_handed_out_is_recorded_with_the_
clusters_identity nor test_a_cursor_of_another_database_of_the_same_cluster_is_refused:
they compare a cursor's identity with the coordinator's system identifier, and on Citus a
cursor carries the identity of the node of the program's shard (the page runs there);
test_roster.py binds cursors to the placement and refuses them after a move. Not the
out-of-order proof (20 s here; test_roster.py runs it on the cluster, shortened) nor the
naive cursor experiment (off unless asked for)."""

from tests.integration.test_roster_consistency import (  # noqa: F401 (fixtures and tests collected here)
    proof_engine,
    test_change_number_taken_first_committed_last,
    test_positions_ahead_of_the_counter_neither_stop_nor_hide_changes,
    test_settle_waits_for_an_older_transaction_then_delivers,
)
from tests.integration.test_roster_cursors import (  # noqa: F401 (fixtures and tests collected here)
    eng,
    test_a_cursor_of_another_cluster_is_refused,
    test_a_cursor_whose_record_is_gone_is_refused,
    test_a_polling_follower_adds_no_records,
    test_a_snapshot_page_read_again_rewrites_its_record_a_change_page_does_not,
    test_forged_cursors_never_issued_are_refused,
    test_identical_pages_read_at_once,
    test_version_1_cursors_are_refused,
)
