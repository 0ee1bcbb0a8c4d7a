"""Alembic environment: the URL comes from the config (set by coordinator.migrate) or the env."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine, pool

from coordinator.db import sqlalchemy_url
from coordinator.models import Base

config = context.config
target_metadata = Base.metadata


def database_url() -> str:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("PATHKEEPER_DATABASE_URL")
    if not url:
        raise RuntimeError("set PATHKEEPER_DATABASE_URL or pass --database-url")
    return sqlalchemy_url(url)


def run_migrations_offline() -> None:
    context.configure(
        url=database_url(), target_metadata=target_metadata, literal_binds=True, compare_type=True
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(database_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata, compare_type=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
