"""One line for an operator instead of a traceback.

The usual ways an operator command fails are not bugs: the database or the search
server is down, a URL is malformed, the database was never migrated, a rebuild or a
compaction cannot be done. They arrive under two roots, ``CoordinatorError`` and the
indexer's ``IndexerError`` (the search seam's errors among them), plus the drivers'
errors of code that holds a connection of its own. For those,
``describe`` gives one line saying what failed and what to do, and every
``pathkeeper`` command prints it as ``error: ...`` and exits with ``EXIT_CANNOT_RUN``;
so does a bad option or argument (click's usage errors).
Anything else is a bug and keeps its traceback; ``PATHKEEPER_TRACEBACK=1`` shows the
traceback of the known ones too.
"""

from __future__ import annotations

import os
import re
from typing import Any

import click

#: The command could not do its work (``verify`` keeps 1 for "ran, found drift").
EXIT_CANNOT_RUN = 2
DATABASE_HINT = "check that PostgreSQL runs and --database-url (or PATHKEEPER_DATABASE_URL)"
SEARCH_HINT = "check that it runs and --es-url (or PATHKEEPER_ES_URL)"
SEARCH_CREDENTIALS_HINT = ("check --search-user and --search-password, or --search-api-key "
                           "(or their PATHKEEPER_SEARCH_* variables)")


def _short(text: object, limit: int = 200) -> str:
    """The first line of a driver's message, without the urllib3 object reprs."""
    value = str(text).strip()
    errno = re.search(r"\[Errno -?\d+\] ([^)\]'\"]+)", value)
    if errno:
        value = errno.group(1)
    value = value.splitlines()[0] if value else ""
    for prefix in ("database unavailable: ", "connection failed: "):
        value = value.removeprefix(prefix)
    return value if len(value) <= limit else value[: limit - 3] + "..."


def describe(exc: BaseException) -> str | None:
    """The operator's line for a known environment failure, None for anything else."""
    import psycopg
    from sqlalchemy.exc import DBAPIError

    from coordinator.db import SCHEMA_MISSING, UPGRADE_HINT, URL_HINT, sqlstate, translate
    from coordinator.errors import (
        CoordinatorError,
        InvalidConfiguration,
        NotMigrated,
        OutcomeUnknown,
        Unavailable,
    )

    if isinstance(exc, DBAPIError):
        exc = translate(exc)
    elif isinstance(exc, psycopg.Error):  # code that holds a connection of its own
        state = sqlstate(exc)
        if state in SCHEMA_MISSING:
            return f"the database is not migrated ({_short(exc)}): {UPGRADE_HINT}"
        if isinstance(exc, psycopg.ProgrammingError) and not state:
            return f"the database URL cannot be parsed; {URL_HINT}"
        return f"cannot reach the database: {_short(exc)}; {DATABASE_HINT}"
    if isinstance(exc, (NotMigrated, InvalidConfiguration, OutcomeUnknown)):
        return str(exc)
    if isinstance(exc, Unavailable):
        return f"cannot reach the database: {_short(exc)}; {DATABASE_HINT}"
    if isinstance(exc, CoordinatorError):
        return _short(exc, 300)
    search = _describe_search(exc)
    if search is not None:
        return search
    from indexer.errors import IndexerError

    if isinstance(exc, IndexerError):
        return _short(exc, 300)
    from alembic.util import CommandError

    if isinstance(exc, CommandError):
        return f"migration: {_short(exc)}"
    return None


def _describe_search(exc: BaseException) -> str | None:
    from indexer.search_engine import (
        SearchAuthFailed,
        SearchRefused,
        SearchTlsFailed,
        SearchUnavailable,
    )

    if isinstance(exc, SearchTlsFailed):  # its message names the server and the fix
        return _short(exc, 300)
    if isinstance(exc, SearchAuthFailed):
        return f"{_short(exc.reason, 300)}; {SEARCH_CREDENTIALS_HINT}"
    if isinstance(exc, SearchUnavailable):
        at = f" at {exc.where}" if exc.where else ""
        return f"cannot reach the search server{at}: {_short(exc)}; {SEARCH_HINT}"
    if isinstance(exc, SearchRefused):
        return f"the search server answered {exc.status}: {_short(exc.error or exc.reason)}"
    return None


def usage_line(exc: click.UsageError) -> str:
    """The one line of a usage error, with where to read the command's usage."""
    message = " ".join(exc.format_message().split())
    if exc.ctx is None:
        return message
    return f"{message} (see: {exc.ctx.command_path} --help)"


class OperatorErrors(click.Group):
    """A command group whose commands (and sub-groups) report known environment
    failures as one ``error:`` line and exit ``EXIT_CANNOT_RUN``."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        # A bad option of the group itself (--log-format xml) fails here, before invoke.
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            click.echo(f"error: {usage_line(exc)}", err=True)
            raise click.exceptions.Exit(EXIT_CANNOT_RUN) from exc

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            # A bad option or argument (a port out of range, a duration too long...):
            # one line naming it, as for the failures below, not click's usage block.
            click.echo(f"error: {usage_line(exc)}", err=True)
            ctx.exit(EXIT_CANNOT_RUN)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            message = describe(exc)
            if message is None or os.environ.get("PATHKEEPER_TRACEBACK"):
                raise
            click.echo(f"error: {message}", err=True)
            ctx.exit(EXIT_CANNOT_RUN)
