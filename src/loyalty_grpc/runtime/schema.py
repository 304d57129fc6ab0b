"""Before a command works on the database: is its schema one this code may run on?
The rule is `store.migrate.Schema` (docs/deployment.md, "Upgrades"); this applies it for `loyalty
serve` and `loyalty wallet send` (`loyalty up` migrates first instead)."""

from __future__ import annotations

import logging

from sqlalchemy.exc import SQLAlchemyError

from loyalty_grpc.runtime.console import command
from loyalty_grpc.runtime.settings import ConfigError
from loyalty_grpc.store import migrate
from loyalty_grpc.store.db_errors import one_line

log = logging.getLogger(__name__)


def require_usable_schema(database_url: str) -> migrate.Schema:
    """The schema of the database at `database_url` when this code may run on it (a newer
    one with a WARNING line). An older one: ConfigError, one line naming the applied
    revision and the code's head and saying to run `loyalty migrate` (exit code 2). A
    database that cannot be read: ConnectionError, one line (exit code 1)."""
    try:
        schema = migrate.check(database_url)
    except SQLAlchemyError as exc:
        raise ConnectionError(
            f"cannot read the database's schema revision: {one_line(exc)}"
        ) from None
    if not schema.usable:
        raise ConfigError(schema.refusal(command("migrate")))
    if schema.state is migrate.SchemaState.NEWER:
        log.warning("%s", schema.newer_warning())
    if schema.state is migrate.SchemaState.CONTRACT_PENDING:
        log.info("%s", schema.contract_note(command("migrate")))
    return schema
