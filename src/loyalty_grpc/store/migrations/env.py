"""Alembic environment. Run through `loyalty_grpc.store.migrate`, which hands over an open
connection (already inside the transaction that holds the migration lock) in
`config.attributes["connection"]`; the `alembic` CLI with `sqlalchemy.url` works too."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from loyalty_grpc.store.db import sqlalchemy_url
from loyalty_grpc.store.tables import metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        # For `alembic revision --autogenerate` only; migrations never import the tables.
        target_metadata=metadata,
        compare_type=True,
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    given = context.config.attributes.get("connection")
    if isinstance(given, Connection):
        _run(given)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no connection and no sqlalchemy.url to migrate")
    engine = create_engine(sqlalchemy_url(url))
    try:
        with engine.connect() as connection:
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("offline (SQL script) migrations are not supported")
run_migrations_online()
