# ruff: noqa: E501 (NOT_ON_CITUS: one entry a line, whatever its length)
"""Issue 27's "done when": the whole suite's guarantees run on the cluster. Every module of
tests/integration and tests/e2e is either imported into a module of tests/citus (some test
of it imported by name, found by reading tests/citus/*.py with `ast`: the body written
once, run on the distributed database) or named in `NOT_ON_CITUS` with the reason it need
not run there; never both, and no name in the table that is not a module. No cluster
needed: it reads files.

Entries one per line, sorted, so that merges stay trivial. "pending (e2e)": the e2e
modules that touch the database through the stack, which another part of issue 27 imports
into tests/citus; the entry goes when its import lands (this test says which)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
PENDING_E2E = "pending (e2e): through the stack onto the database, imported by issue 27's e2e part"

NOT_ON_CITUS: dict[str, str] = {
    "tests.e2e.test_backup_embedded": "WAL archiving and backups of `loyalty up`'s embedded PostgreSQL, one node",
    "tests.e2e.test_cli": "the `loyalty` command's processes and signals, no guarantee of the data",
    "tests.e2e.test_client_address": "the client address Envoy forwards and the failed-check limit in the server (test_server_on_citus.py runs that limit on the cluster)",
    "tests.e2e.test_edge": "the gateway's edge in front of an in-test gRPC server, no database",
    "tests.e2e.test_envoy_admin": "Envoy's admin socket and metrics listener, no database",
    "tests.e2e.test_envoy_parent_death": "Envoy's life bound to its parent process, no database",
    "tests.e2e.test_field_limits": PENDING_E2E,
    "tests.e2e.test_gateway_errors": "the envelope of every status from an in-test gRPC server, no database",
    "tests.e2e.test_gateway_limits": "the gateway's limits against slow and large requests, no guarantee of the data",
    "tests.e2e.test_gateway_mark": "the header Envoy sets, seen by the server, no guarantee of the data",
    "tests.e2e.test_gateway_operator_routes": "an operator's route in the gateway's configuration, no database",
    "tests.e2e.test_gateway_reload": "Envoy's configuration swapped under load, the database incidental",
    "tests.e2e.test_gateway_restart": "the gateway's reloaded configuration across a restart, the database incidental",
    "tests.e2e.test_grpc_mtls": "mutual TLS on the gRPC port, the database incidental",
    "tests.e2e.test_header_fuzz": "hostile headers through Envoy answered without a 5xx, the database incidental",
    "tests.e2e.test_look_alikes": PENDING_E2E,
    "tests.e2e.test_metrics_from_zero": "the metric families of a fresh `serve --workers`, the database incidental",
    "tests.e2e.test_monitoring": "the shipped alerts' and dashboard's metrics exported, the database incidental",
    "tests.e2e.test_nul_characters": PENDING_E2E,
    "tests.e2e.test_openapi_clients": PENDING_E2E,
    "tests.e2e.test_openapi_schemathesis": PENDING_E2E,
    "tests.e2e.test_operation_errors": PENDING_E2E,
    "tests.e2e.test_ping_and_auth": PENDING_E2E,
    "tests.e2e.test_promos_codes": PENDING_E2E,
    "tests.e2e.test_rate_limit_http": PENDING_E2E,
    "tests.e2e.test_rate_limit_workers": PENDING_E2E,
    "tests.e2e.test_redeem": PENDING_E2E,
    "tests.e2e.test_request_id": "the request id in the server's and Envoy's logs, the database incidental",
    "tests.e2e.test_resolve": PENDING_E2E,
    "tests.e2e.test_roster": PENDING_E2E,
    "tests.e2e.test_stale_data_dir": "`loyalty status` beside a stale data dir, no database",
    "tests.e2e.test_status_gateway": "`loyalty status` of a gateway process, no database",
    "tests.e2e.test_status_workers": "worker processes' rolling stop and `loyalty status`, the database incidental",
    "tests.e2e.test_strict_bodies": PENDING_E2E,
    "tests.e2e.test_strict_json": "the gateway's JSON check in front of an in-test gRPC server, no database",
    "tests.e2e.test_tls": "HTTPS at the gateway, the database incidental",
    "tests.e2e.test_tx": PENDING_E2E,
    "tests.e2e.test_up_tls": "`loyalty up` serving HTTPS on its embedded PostgreSQL",
    "tests.e2e.test_upgrade": PENDING_E2E,
    "tests.e2e.test_upstreams": PENDING_E2E,
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
}


def _modules(folder: str) -> set[str]:
    return {f"tests.{folder}.{path.stem}" for path in (TESTS / folder).glob("test_*.py")}


def imported_into_citus() -> set[str]:
    """The modules of tests/integration and tests/e2e some module of tests/citus imports a
    test from (`from tests.integration.test_x import test_y, …`); helpers imported alone
    do not count."""
    found = set()
    for path in (TESTS / "citus").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module is not None
                and node.module.startswith(("tests.integration.test_", "tests.e2e.test_"))
                and any(alias.name.startswith("test_") for alias in node.names)
            ):
                found.add(node.module)
    return found


def test_every_module_runs_on_the_cluster_or_says_why_not() -> None:
    modules = _modules("integration") | _modules("e2e")
    imported = imported_into_citus()
    assert imported <= modules  # what tests/citus imports exists
    assert sorted(set(NOT_ON_CITUS) - modules) == []  # no stale name
    assert sorted(imported & set(NOT_ON_CITUS)) == []  # imported, yet said not to be
    assert sorted(modules - imported - set(NOT_ON_CITUS)) == []  # neither


def test_the_table_is_sorted_one_entry_a_line() -> None:
    assert list(NOT_ON_CITUS) == sorted(NOT_ON_CITUS)
    source = Path(__file__).read_text()
    for module in NOT_ON_CITUS:
        assert source.count(f'    "{module}": ') == 1
