"""Options shared by every ``pathkeeper`` command group (a module of its own, so the
groups can import it without importing each other)."""

from __future__ import annotations

import click

DATABASE_URL_ENV = "PATHKEEPER_DATABASE_URL"
ES_URL_ENV = "PATHKEEPER_ES_URL"

database_url_option = click.option(
    "--database-url",
    envvar=DATABASE_URL_ENV,
    required=True,
    help=f"libpq or SQLAlchemy URL of the PostgreSQL database (env {DATABASE_URL_ENV}).",
)
es_url_option = click.option(
    "--es-url",
    envvar=ES_URL_ENV,
    required=True,
    help=f"Elasticsearch URL (env {ES_URL_ENV}).",
)
