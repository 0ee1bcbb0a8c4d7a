"""Options shared by every ``pathkeeper`` command group (a module of its own, so the
groups can import it without importing each other)."""

from __future__ import annotations

from datetime import timedelta

import click

from coordinator.paths import MAX_CONTENT_BYTES

DATABASE_URL_ENV = "PATHKEEPER_DATABASE_URL"
ES_URL_ENV = "PATHKEEPER_ES_URL"
MAX_CONTENT_BYTES_ENV = "PATHKEEPER_MAX_CONTENT_BYTES"
LOG_FORMAT_ENV = "PATHKEEPER_LOG_FORMAT"

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
max_content_bytes_option = click.option(
    "--max-content-bytes",
    envvar=MAX_CONTENT_BYTES_ENV,
    type=click.IntRange(min=1),
    default=MAX_CONTENT_BYTES,
    show_default=True,
    help="The largest file content, in bytes of UTF-8: larger ones are refused on every "
         f"write path, and the indexer checks that it fits the search server's request "
         f"limit (env {MAX_CONTENT_BYTES_ENV}).",
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
