"""Alembic's environment: migrates over the connection `webui.store.schema` passes in
(`config.attributes["connection"]`), against the models' metadata. SQLite alters tables in
batch mode (copy and move), since it cannot alter most of a table in place."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

from webui.store import models  # noqa: F401  (registers the tables)

config = context.config


def run_migrations_online(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=SQLModel.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=SQLModel.metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    bound = config.attributes.get("connection")
    if bound is None:
        raise RuntimeError("webui.store.schema passes the connection to migrate over")
    run_migrations_online(bound)
