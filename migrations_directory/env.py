"""Alembic environment of the directory database (docs/sharding.md, section 1): its own
migrations and its own version table, so that a directory and a shard never share a
revision history, and a directory placed in a database of a shard's server is told apart
from a shard by the tables it holds."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine, pool

from coordinator.db import sqlalchemy_url
from coordinator.migrate import DIRECTORY_VERSION_TABLE as VERSION_TABLE

config = context.config


def database_url() -> str:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("PATHKEEPER_DIRECTORY_URL")
    if not url:
        raise RuntimeError("set PATHKEEPER_DIRECTORY_URL or pass --directory")
    return sqlalchemy_url(url)


def run_migrations_offline() -> None:
    context.configure(url=database_url(), literal_binds=True, version_table=VERSION_TABLE)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(database_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, version_table=VERSION_TABLE)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
