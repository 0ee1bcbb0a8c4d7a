"""Options shared by every ``pathkeeper`` command group (a module of its own, so the
groups can import it without importing each other), and how options meet the environment.

Every option can be set by a variable of one prefix, ``PATHKEEPER_``: by default the
command path and the option's name (click's ``auto_envvar_prefix``:
``PATHKEEPER_SERVE_MAX_INFLIGHT`` for ``serve --max-inflight``,
``PATHKEEPER_INDEXER_RUN_PARTITIONS``); the options shared by many commands have one
explicit name for all (``PATHKEEPER_DATABASE_URL``, ``PATHKEEPER_ES_URL``...). ``--help``
shows each option's variable (``show_envvars``)."""

from __future__ import annotations

from datetime import timedelta

import click

from coordinator.paths import MAX_CONTENT_BYTES
from indexer.contract import DEFAULT_ALIAS

DATABASE_URL_ENV = "PATHKEEPER_DATABASE_URL"
ES_URL_ENV = "PATHKEEPER_ES_URL"
MAX_CONTENT_BYTES_ENV = "PATHKEEPER_MAX_CONTENT_BYTES"
LOG_FORMAT_ENV = "PATHKEEPER_LOG_FORMAT"
#: The prefix of every option's variable.
ENV_PREFIX = "PATHKEEPER"

database_url_option = click.option(
    "--database-url",
    envvar=DATABASE_URL_ENV,
    required=True,
    help="libpq or SQLAlchemy URL of the PostgreSQL database.",
)
es_url_option = click.option(
    "--es-url",
    envvar=ES_URL_ENV,
    required=True,
    help="Elasticsearch URL.",
)
max_content_bytes_option = click.option(
    "--max-content-bytes",
    envvar=MAX_CONTENT_BYTES_ENV,
    type=click.IntRange(min=1),
    default=MAX_CONTENT_BYTES,
    show_default=True,
    help="The largest file content, in bytes of UTF-8: larger ones are refused on every "
         "write path, and the indexer checks that it fits the search server's request "
         "limit.",
)

#: The worker's alias and checkpoint name (``indexer run``, ``status``, ``dead-letters``).
worker_alias_option = click.option(
    "--alias", default=DEFAULT_ALIAS, show_default=True, help="Index alias the worker writes to."
)
consumer_option = click.option(
    "--consumer", default="", help="Checkpoint/lease name (default: indexer:<alias>)."
)


def show_envvars(command: click.Command) -> None:
    """Have ``--help`` of ``command`` and of all its subcommands name each option's
    variable (click shows it only when asked, option by option)."""
    for param in command.params:
        if isinstance(param, click.Option):
            param.show_envvar = True
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            show_envvars(sub)


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
