"""An upgrade and a crash under load, through Envoy, with zero failed calls (issue 13):

- an upgrade: `serve` A serves; `serve --share-port` B starts beside it on the same port
  (its own data dir and metrics port); A gets SIGTERM (its rolling stop hands its clients
  over to B). Every call of the load succeeds;
- a crash: C starts beside B; B and its workers are killed with SIGKILL at once. Calls cut
  mid-way are retried by Envoy (the route's retry policy: every POS operation is idempotent)
  and succeed on C.

The load is real sales (`tx`), each with its own id_externo, so the ledger can be audited
afterwards: every sale that got a 200 is recorded exactly once, and the fan's balance is
exactly the points of those sales, retries included."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
from tests.e2e.processes import LOYALTY, loyalty_env
from tests.e2e.sales_load import (
    TOKEN,
    Sales,
    audit,
    kill_whole,
    sales_key,
    serve,
    warnings,
)
from tests.support import free_port


def test_upgrade_and_crash_fail_no_call(tmp_path: Path, migrated_database: str) -> None:
    port = free_port()
    serves = [serve(tmp_path, "a", migrated_database, port)]
    proxy = None
    sales = None
    try:
        key = sales_key(port)
        proxy = EnvoyProcess.start_spec(
            gateway_spec(http_port=free_port(), upstreams=(f"127.0.0.1:{port}",)),
            work_dir=tmp_path / "envoy",
        )
        sales = Sales(proxy.url, key)
        sales.start()

        # The upgrade: B beside A, then A's rolling stop.
        serves.append(serve(tmp_path, "b", migrated_database, port, "--share-port"))
        sales.wait_for(100)
        assert serves[0].stop(signal.SIGTERM) == 0, "\n".join(serves[0].lines)
        sales.wait_for(200)  # on B alone

        # The crash: C beside B, then B killed whole.
        serves.append(serve(tmp_path, "c", migrated_database, port, "--share-port"))
        sales.wait_for(100)
        kill_whole(serves[1])
        sales.wait_for(200)  # on C alone
    finally:
        if sales is not None:
            sales.stop()
        if proxy is not None:
            proxy.stop()
        for running in serves:
            if running.proc.poll() is None:
                running.stop(signal.SIGTERM)
    assert sales.failures == [], "\n".join([*sales.failures, *warnings(serves)])
    audit(migrated_database, sales.ok)


def test_a_second_serve_never_shares_a_data_dir(tmp_path: Path, migrated_database: str) -> None:
    port = free_port()
    first = serve(tmp_path, "a", migrated_database, port)
    try:
        second = subprocess.run(
            [*LOYALTY, "serve", "--share-port", "--grpc-port", str(port)],
            cwd=tmp_path,
            env=loyalty_env(
                LOYALTY_DATABASE_URL=migrated_database,
                LOYALTY_ADMIN_TOKEN=TOKEN,
                LOYALTY_DATA_DIR=str(tmp_path / "a"),
            ),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        first.stop(signal.SIGTERM)
    assert second.returncode == 2
    assert second.stderr == (
        f"error: another `serve` (pid {first.proc.pid}) runs from {tmp_path / 'a'}: "
        "give this one its own --data-dir (and --metrics-port)\n"
    )
