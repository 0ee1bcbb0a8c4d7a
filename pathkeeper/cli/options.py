"""Options shared by every ``pathkeeper`` command group (a module of its own, so the
groups can import it without importing each other)."""

from __future__ import annotations

from datetime import timedelta

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


def check_duration(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> timedelta | None:
    """A duration option ("7d", "12h", "30m", "0") as a ``timedelta``; a bad one is a
    usage error naming the option."""
    if value is None:
        return None
    from indexer.retention import parse_duration

    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
