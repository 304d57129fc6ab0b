"""The wallet sender's guarantees of tests/integration/test_wallet.py on the cluster (their
bodies imported, not copied): one delivery of the latest balance per fan, back-off,
leases, concurrent senders, fairness across programs; all but the bounded-plans test,
whose auto_explain notices come from the node that runs a call (on the cluster, a
worker). And what only a cluster shows: a shard move between two ingest runs keeps the
newest balance, though the new node's outbox ids are lower (versions decide, not ids)."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Engine

from loyalty_grpc.store.wallet import ingest
from loyalty_grpc.wallet import SendReport, send_pending
from tests.citus.cluster import HOST, Cluster, connect
from tests.citus.test_cluster import Shard, shard_of, value
from tests.integration.test_wallet import (  # noqa: F401 (fixtures and tests collected here)
    Clock,
    Recording,
    _empty_wallet_tables,
    change,
    new_fan,
    pending,
    programa,
    test_a_backlog_is_coalesced_and_a_large_one_spans_runs,
    test_a_batch_provider_gets_one_call_and_reports_each_fan,
    test_a_committed_change_writes_the_new_balance,
    test_a_fan_being_delivered_is_not_claimed_again_and_sales_do_not_wait,
    test_a_permanent_failure_drops_that_balance_only,
    test_a_program_with_a_huge_backlog_does_not_starve_the_others,
    test_a_rolled_back_change_leaves_no_outbox_row,
    test_a_sale_does_not_wait_for_a_claim_transaction,
    test_a_zero_point_move_writes_nothing,
    test_an_expired_lease_goes_to_the_next_sender,
    test_an_older_balance_folded_late_never_replaces_a_newer_one,
    test_an_unexpected_provider_error_is_retried,
    test_backlog_figures,
    test_backoff_doubles_up_to_five_minutes,
    test_batch_limits_a_run_and_oldest_goes_first,
    test_cli_wallet_send,
    test_cli_wallet_send_needs_a_migrated_database,
    test_cli_wallet_send_rejects_a_bad_provider,
    test_concurrent_runs_never_deliver_a_fan_twice,
    test_failures_back_off_and_do_not_hold_up_other_fans,
    test_fans_in_back_off_take_no_claims_from_others,
    test_retry_after_from_the_provider_is_respected,
    test_rows_committed_out_of_order_are_not_lost,
    test_several_senders_share_the_work_while_sales_go_on,
    test_stopping_hands_back_the_rest_of_the_batch,
    test_the_sender_plans_every_execution_for_its_parameters,
    test_the_sender_thread_delivers_on_its_own,
    test_the_status_line_says_when_it_estimates,
    test_three_changes_one_delivery_of_the_latest_balance,
    test_two_fans_two_deliveries,
    test_wake_runs_the_sender_at_once,
)


def _group(url: str, port: int) -> int:
    with connect(url) as conn:
        return int(value(conn, "SELECT groupid FROM pg_dist_node WHERE nodeport = %s", (port,)))


def _shard(url: str) -> Shard:
    with connect(url) as conn:
        return shard_of(conn, "fans", "halcones")


def _move_program(url: str, shard: Shard, port: int) -> Shard:
    """Move halcones's group of co-located shards to the worker at `port` (logical
    replication)."""
    with connect(url) as conn:
        conn.execute("CALL citus_cleanup_orphaned_resources()")
        conn.execute(
            "SELECT citus_move_shard_placement(%s, %s, %s, %s, %s, "
            "shard_transfer_mode => 'force_logical')",
            (shard.id, HOST, shard.port, HOST, port),
        )
    moved = _shard(url)
    assert moved.port == port
    return moved


def _change_on(url: str, fan: int, puntos: int) -> int:
    """A balance change as the program's delegated functions make it, on the worker holding
    the shard (the outbox id from that node's range of the distributed sequence): the
    balance UPDATE, then the outbox row. Returns the row's id."""
    with connect(url) as conn, conn.transaction():
        conn.execute(
            "UPDATE fans SET puntos = puntos + %s WHERE programa_id = 'halcones' AND pk = %s",
            (puntos, fan),
        )
        return int(
            value(
                conn,
                "INSERT INTO wallet_outbox (programa_id, fan_pk, saldo) SELECT programa_id, pk, "
                "puntos FROM fans WHERE programa_id = 'halcones' AND pk = %s RETURNING id",
                (fan,),
            )
        )


def test_a_shard_move_between_ingest_runs_keeps_the_newest_balance(
    citus_cluster: Cluster,
    db_url: str,
    engine: Engine,
    new_fan: Callable[[], int],  # noqa: F811 (the imported fixture)
) -> None:
    """A balance written and folded on the worker of the higher group; the program's
    shards move to the other worker; a newer balance written there takes a LOWER outbox id
    (that node's range of the distributed sequence). The next ingest folds it in all the
    same (its version is higher: the balance counter moved with the fan's row), and the
    newer balance is the one delivered."""
    fan = new_fan()
    database = db_url.rsplit("/", 1)[1].split("?", 1)[0]
    workers = sorted(citus_cluster.workers, key=lambda w: _group(db_url, w.port))
    low, high = workers[0], workers[-1]
    shard = _shard(db_url)
    if shard.port != high.port:
        shard = _move_program(db_url, shard, high.port)
    first_id = _change_on(high.url(database), fan, 10)
    assert ingest(engine, "halcones", limit=100) == (1, 1)

    _move_program(db_url, shard, low.port)
    second_id = _change_on(low.url(database), fan, 5)
    assert second_id < first_id  # by ids, the newer balance would look older
    assert ingest(engine, "halcones", limit=100) == (1, 1)
    assert pending(engine) == {fan: 15}
    provider = Recording()
    assert send_pending(engine, provider, now=Clock()) == SendReport(claimed=1, delivered=1)
    assert provider.delivered == [(fan, 15)]
    assert pending(engine) == {}
