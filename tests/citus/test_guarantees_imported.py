# ruff: noqa: E501 (NOT_ON_CITUS: one entry a line, whatever its length)
"""Issue 27's "done when": the whole suite's guarantees run on the cluster. Every module of
tests/integration and tests/e2e is either imported into a module of tests/citus (some test
of it imported by name, found by reading tests/citus/*.py with `ast`: the body written
once, run on the distributed database) or named in `NOT_ON_CITUS` with the reason it need
not run there; never both, and no name in the table that is not a module. No cluster
needed: it reads files.

Within an imported module, every test is imported too or named in `TESTS_NOT_ON_CITUS`
(`module::test`) with the reason: a test added to a module later runs on the cluster or
says why not. Entries one per line, sorted, so that merges stay trivial."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent

NOT_ON_CITUS: dict[str, str] = {
    "tests.e2e.test_backup_embedded": "WAL archiving and backups of `loyalty up`'s embedded PostgreSQL, one node",
    "tests.e2e.test_client_address": "the client address Envoy forwards and the failed-check limit in the server (test_server_on_citus.py runs that limit on the cluster)",
    "tests.e2e.test_edge": "the gateway's edge in front of an in-test gRPC server, no database",
    "tests.e2e.test_envoy_admin": "Envoy's admin socket and metrics listener, no database",
    "tests.e2e.test_envoy_parent_death": "Envoy's life bound to its parent process, no database",
    "tests.e2e.test_field_limits": "the gateway's and the server's field limits refused before any statement; the database incidental",
    "tests.e2e.test_gateway_errors": "the envelope of every status from an in-test gRPC server, no database",
    "tests.e2e.test_gateway_limits": "the gateway's limits against slow and large requests, no guarantee of the data",
    "tests.e2e.test_gateway_mark": "the header Envoy sets, seen by the server, no guarantee of the data",
    "tests.e2e.test_gateway_operator_routes": "an operator's route in the gateway's configuration, no database",
    "tests.e2e.test_gateway_reload": "Envoy's configuration swapped under load, the database incidental",
    "tests.e2e.test_grpc_mtls": "mutual TLS on the gRPC port, the database incidental",
    "tests.e2e.test_header_fuzz": "hostile headers through Envoy answered without a 5xx, the database incidental",
    "tests.e2e.test_look_alikes": "look-alike digits and letters refused by the parsers before any statement (tests.integration.test_look_alikes runs on the cluster)",
    "tests.e2e.test_monitoring": "the shipped alerts' and dashboard's metrics exported, the database incidental",
    "tests.e2e.test_openapi_clients": "clients generated from the OpenAPI document against the contract's shape, the database incidental",
    "tests.e2e.test_openapi_schemathesis": "the contract's shape fuzzed through the gateway, the database incidental",
    "tests.e2e.test_stale_data_dir": "`loyalty status` beside a stale data dir, no database",
    "tests.e2e.test_status_gateway": "`loyalty status` of a gateway process, no database",
    "tests.e2e.test_strict_bodies": "the gateway's strict body check, refused before any statement",
    "tests.e2e.test_strict_json": "the gateway's JSON check in front of an in-test gRPC server, no database",
    "tests.e2e.test_tls": "HTTPS at the gateway, the database incidental",
    "tests.e2e.test_up_tls": "`loyalty up` serving HTTPS on its embedded PostgreSQL",
    "tests.e2e.test_upstreams": "Envoy's upstreams changed under load; the same sales audit runs on the cluster in test_e2e_upgrade_on_citus.py",
    "tests.integration.test_backup_refusals": "`loyalty backup` of one PostgreSQL server (its WAL archive), not of a cluster",
    "tests.integration.test_compose_schema": "compose files against their schemas, no database",
    "tests.integration.test_connect_timeout": "a socket that never answers, no database",
    "tests.integration.test_database_password_file": "a role logging in with a password on the session's PostgreSQL: the settings' reading of the file, not a guarantee of the data",
    "tests.integration.test_docs_site": "the documentation site's build, no database",
    "tests.integration.test_embedded_holders": "the embedded PostgreSQL's holder processes, one node",
    "tests.integration.test_gateway_validate": "Envoy's validation of the gateway's configuration, no database",
    "tests.integration.test_generated_fresh": "generated files up to date, no database",
    "tests.integration.test_migration_0012": "the rolling upgrade from 0011 on one node (a cluster starts at head; test_move_to_citus.py moves an installation onto it)",
    "tests.integration.test_patroni_config": "Patroni's configuration files, no database",
    "tests.integration.test_pre_commit": "the pre-commit hooks, no database",
    "tests.integration.test_process_file": "the processes file `loyalty status` reads, no database",
    "tests.integration.test_prometheus_rules": "the alert rules and dashboard, no database",
    "tests.integration.test_response_metadata": "response metadata on a bare gRPC server, no database",
    "tests.integration.test_shared_port": "SO_REUSEPORT hand-over with plain sockets, no database",
    "tests.integration.test_systemd_units": "the systemd units, no database",
    "tests.integration.test_worker_start": "a worker that cannot start, no database",
    "tests.reliability.test_backup_restore": "`loyalty backup` of one PostgreSQL server; a cluster's consistent backup across its nodes is not built (docs/citus.md, Not yet)",
    "tests.reliability.test_failover": "one PostgreSQL's synchronous standby promoted; on Citus each node has its own, the same way (docs/citus.md)",
    "tests.reliability.test_frozen_worker": "the supervisor replacing a frozen worker process, the database incidental",
    "tests.reliability.test_patroni_failover": "Patroni's failover of one PostgreSQL; on Citus each node's group is made highly available the same way (docs/citus.md)",
    "tests.reliability.test_postgres_outage": "one PostgreSQL server of the module's own restarted and stopped; the answers while the database is away do not depend on the engine",
    "tests.reliability.test_restarts": "the supervisor restarting killed workers and Envoy, the database incidental (kills mid-load run on the cluster: test_reliability_under_load_on_citus.py)",
    "tests.reliability.test_roster_failover": "a roster follower across one PostgreSQL's failover (on Citus a node's failover keeps its system identifier, the placement identity of cursors: docs/citus.md)",
    "tests.reliability.test_roster_restore": "roster cursors across a point-in-time restore of one PostgreSQL server",
}

TESTS_NOT_ON_CITUS: dict[str, str] = {
    "tests.e2e.test_cli::test_gateway_check": "the gateway's configuration check, no database",
    "tests.e2e.test_cli::test_gateway_run_listens_only_on_the_address_given_and_logs_json": "the gateway process alone, no database",
    "tests.e2e.test_cli::test_serve_without_database_url_says_so": "no database by design",
    "tests.e2e.test_cli::test_up_demo_serves_and_stops_cleanly": "`loyalty up` on its embedded PostgreSQL (test_tour_on_citus.py runs `up --demo` on the coordinator)",
    "tests.e2e.test_cli::test_wheel_ships_gateway_migrations_and_demo": "the wheel's contents, no database",
    "tests.e2e.test_readme_tour::test_no_tour_pastes_a_cursor": "reads the docs, no database",
    "tests.e2e.test_readme_tour::test_the_tour_covers_its_endpoints": "reads the docs, no database",
    "tests.e2e.test_request_id::test_access_log_has_the_path_without_the_cursor_nor_the_key": "Envoy's access log, no database",
    "tests.e2e.test_request_id::test_envoy_stats_in_prometheus_format": "Envoy's stats, no database",
    "tests.e2e.test_status_workers::test_a_port_in_use_fails_before_any_worker_starts": "fails before any connection",
    "tests.e2e.test_status_workers::test_status_of_a_killed_supervisor_says_unhealthy": "`loyalty status` of a process, no database",
    "tests.e2e.test_status_workers::test_status_says_not_running": "nothing running",
    "tests.e2e.test_status_workers::test_up_with_workers_and_status_on_its_embedded_database": "`loyalty up`'s own embedded PostgreSQL",
    "tests.integration.test_by_program::test_every_hot_statement_reads_each_program_table_by_its_program": "reads PostgreSQL's plans; on the coordinator the plans are Citus's (test_single_shard.py checks them there)",
    "tests.integration.test_migrations::test_downgrade_to_base_and_back": "downgrades: a cluster starts at head (test_move_to_citus.py moves an installation onto it)",
    "tests.integration.test_migrations::test_insert_is_stamped_by_the_trigger": "compares with the coordinator's transaction id; on Citus the shard node's stamps (test_roster.py)",
    "tests.integration.test_migrations::test_sequences_and_trigger_exist": "the coordinator's catalogue also lists Citus's own sequences (test_schema.py checks the cluster's)",
    "tests.integration.test_migrations::test_wallet_data_survives_0007_both_ways": "downgrades: a cluster starts at head",
    "tests.integration.test_rate_limit::test_the_request_and_the_settlement_find_the_row_by_its_index": "counts one PostgreSQL's table scans; on Citus they happen on the workers",
    "tests.integration.test_roster_consistency::test_feed_from_a_snapshot_mirrors_exactly_under_out_of_order_commits": "20 s; test_roster.py runs the out-of-order proof on the cluster, shortened",
    "tests.integration.test_roster_consistency::test_naive_sequence_cursor_experiment": "an experiment on a design not shipped",
    "tests.integration.test_roster_cursors::test_a_cursor_of_another_database_of_the_same_cluster_is_refused": "compares with the coordinator's identity; on Citus a cursor carries the shard node's (test_roster.py)",
    "tests.integration.test_roster_cursors::test_every_cursor_handed_out_is_recorded_with_the_clusters_identity": "compares with the coordinator's identity; on Citus a cursor carries the shard node's (test_roster.py)",
    "tests.integration.test_wallet::test_every_sender_statement_reads_a_bounded_part_of_the_backlog": "reads one PostgreSQL's plans; on the coordinator the plans are Citus's",
    "tests.integration.test_wallet::test_the_record_never_reads_its_arrays_once_per_row": "reads one PostgreSQL's plans; on the cluster the statement runs inside the call delegated to a node",
    "tests.integration.test_wallet_sender_failures::test_a_database_refusing_connections_fails_runs_quietly_until_it_is_back": "fails differently on Citus (the coordinator answers, a worker refuses)",
    "tests.integration.test_wallet_sender_failures::test_a_missing_table_fails_runs_quietly_until_it_is_back": "drops a distributed table, which Citus does differently",
    "tests.reliability.test_under_load::test_calls_cut_by_a_worker_kill_get_the_envelope": "what Envoy answers for a call a kill cut, the database incidental; 40-80 s",
}


def _modules(folder: str) -> set[str]:
    return {f"tests.{folder}.{path.stem}" for path in (TESTS / folder).glob("test_*.py")}


FOLDERS = ("integration", "e2e", "reliability")


def imported_into_citus() -> dict[str, set[str]]:
    """The modules of tests/integration, tests/e2e and tests/reliability some module of
    tests/citus imports a test from (`from tests.integration.test_x import test_y, …`),
    each with the tests imported; helpers imported alone do not count."""
    found: dict[str, set[str]] = {}
    prefixes = tuple(f"tests.{folder}.test_" for folder in FOLDERS)
    for path in (TESTS / "citus").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(prefixes):
                tests = {alias.name for alias in node.names if alias.name.startswith("test_")}
                if tests:
                    found.setdefault(str(node.module), set()).update(tests)
    return found


def _tests_in(module: str) -> set[str]:
    """The test functions a module defines at its top level."""
    tree = ast.parse((TESTS.parent / (module.replace(".", "/") + ".py")).read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }


def test_every_module_runs_on_the_cluster_or_says_why_not() -> None:
    modules = set().union(*(_modules(folder) for folder in FOLDERS))
    imported = set(imported_into_citus())
    assert imported <= modules  # what tests/citus imports exists
    assert sorted(set(NOT_ON_CITUS) - modules) == []  # no stale name
    assert sorted(imported & set(NOT_ON_CITUS)) == []  # imported, yet said not to be
    assert sorted(modules - imported - set(NOT_ON_CITUS)) == []  # neither


def test_every_test_of_an_imported_module_runs_there_or_says_why_not() -> None:
    imported = imported_into_citus()
    expected = {f"{module}::{test}" for module in imported for test in _tests_in(module)}
    brought = {f"{module}::{test}" for module, tests in imported.items() for test in tests}
    assert sorted(brought - expected) == []  # what tests/citus imports exists
    assert sorted(set(TESTS_NOT_ON_CITUS) - expected) == []  # no stale name
    assert sorted(brought & set(TESTS_NOT_ON_CITUS)) == []  # imported, yet said not to be
    assert sorted(expected - brought - set(TESTS_NOT_ON_CITUS)) == []  # neither


def test_the_tables_are_sorted_one_entry_a_line() -> None:
    source = Path(__file__).read_text()
    for table in (NOT_ON_CITUS, TESTS_NOT_ON_CITUS):
        assert list(table) == sorted(table)
        for name in table:
            assert source.count(f'    "{name}": ') == 1
