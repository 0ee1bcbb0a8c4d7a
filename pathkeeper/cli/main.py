"""The ``pathkeeper`` command line: a thin entry point over the coordinator and indexer.

The root group holds ``db``, ``demo`` and ``import``; the other commands live in the
sibling modules (``namespaces``, ``serve``, ``indexer``, ``replay``, ``retention``) and
are added here.
Each module imports what a command needs inside the command, so ``pathkeeper --help``
does not import FastAPI, Elasticsearch or the worker.
"""

from __future__ import annotations

import logging
import sys
from datetime import timedelta
from typing import BinaryIO

import click

from coordinator.errors import CoordinatorError
from coordinator.settings import MAX_IMPORT_LINE_BYTES
from indexer.logs import LOG_FORMATS, LogFormat, choose_format, configure
from pathkeeper.cli.errors import EXIT_CANNOT_RUN, OperatorErrors
from pathkeeper.cli.indexer import indexer, search_node
from pathkeeper.cli.namespaces import ns, tree
from pathkeeper.cli.options import (
    DATABASE_URL_ENV,
    ENV_PREFIX,
    ES_URL_ENV,
    LOG_FORMAT_ENV,
    check_duration,
    database_url_option,
    max_content_bytes_option,
    show_envvars,
)
from pathkeeper.cli.replay import reindex, replay, verify
from pathkeeper.cli.retention import compact, snapshot
from pathkeeper.cli.serve import keys, serve
from pathkeeper.cli.shard_move import shard


@click.group(cls=OperatorErrors, context_settings={"help_option_names": ["-h", "--help"],
                                                   "auto_envvar_prefix": ENV_PREFIX})
@click.version_option(package_name="pathkeeper", prog_name="pathkeeper")
@click.option("--log-format", type=click.Choice(LOG_FORMATS), envvar=LOG_FORMAT_ENV,
              default=None, help="Log lines on stderr as JSON objects or text (default: JSON "
                                 "unless stderr is a terminal).")
def main(log_format: LogFormat | None) -> None:
    """Pathkeeper: transactional trees in PostgreSQL, searchable in Elasticsearch."""
    # Warnings only for the one-shot commands; the long-running ones (serve, the worker)
    # and those that report progress raise the level.
    configure(logging.WARNING, choose_format(log_format))


@main.group()
def db() -> None:
    """Schema migrations (Alembic)."""


@db.command("upgrade")
@database_url_option
@click.argument("revision", default="head")
def db_upgrade(database_url: str, revision: str) -> None:
    """Apply migrations up to REVISION (default: head)."""
    from coordinator.migrate import upgrade

    upgrade(database_url, revision)
    click.echo(f"database upgraded to {_at(database_url)}")


@db.command("downgrade")
@database_url_option
@click.argument("revision")
def db_downgrade(database_url: str, revision: str) -> None:
    """Revert migrations down to REVISION (e.g. base)."""
    from coordinator.migrate import downgrade

    downgrade(database_url, revision)
    click.echo(f"database downgraded to {_at(database_url)}")


@db.command("current")
@database_url_option
def db_current(database_url: str) -> None:
    """Print the revision the database is at, and whether it is this code's head."""
    from coordinator.migrate import head_revision

    at = _at(database_url)
    head = head_revision()
    state = "head" if at == head else f"behind: this code needs {head}"
    click.echo(f"{at} ({state})" if at != "none" else f"none (never migrated; {state})")


@db.command("history")
@database_url_option
def db_history(database_url: str) -> None:
    """List every migration, oldest first; '*' marks the one the database is at."""
    from coordinator.migrate import history

    at = _at(database_url)
    for rev in history(at):
        click.echo(f"{'*' if rev.current else ' '} {rev.revision}  {rev.title}")


def _at(database_url: str) -> str:
    """The revision a database is at, or 'none'."""
    from sqlalchemy import create_engine, pool

    from coordinator.db import parse_database_url
    from coordinator.migrate import current_revision

    engine = create_engine(parse_database_url(database_url), poolclass=pool.NullPool)
    try:
        return current_revision(engine) or "none"
    finally:
        engine.dispose()


@main.command()
@click.option("--database-url", envvar=DATABASE_URL_ENV, default=None,
              help="Use this database instead of starting a throwaway local cluster.")
@click.option("--es-url", envvar=ES_URL_ENV, default=None,
              help="Use this Elasticsearch instead of starting a local node "
                   "(PATHKEEPER_SEARCH=noida: the stand-in).")
@click.option("--clients", default=8, show_default=True, help="Clients renaming at once.")
@click.option("--seconds", default=3.0, show_default=True, metavar="SECONDS",
              help="How long the clients rename.")
@click.option("--serve/--no-serve", default=True, show_default=True,
              help="Keep serving the API afterwards, until Ctrl-C or SIGTERM (with or "
                   "without a terminal); --no-serve exits once the checks are done.")
@click.option("--serve-for", default=None, metavar="DURATION", callback=check_duration,
              help="Serve the API this long (5s, 10m, 1h), then exit (default: until a "
                   "signal).")
def demo(
    database_url: str | None, es_url: str | None, clients: int, seconds: float,
    serve: bool, serve_for: timedelta | None,
) -> None:
    """The main job on embedded defaults: concurrent renames, indexed and searched; then
    the HTTP API stays up (a URL and a key printed) until Ctrl-C or SIGTERM."""
    from pathkeeper.demo import run_demo

    sys.exit(run_demo(database_url, es_url, clients, seconds, serve, serve_for))


@main.command("import")
@database_url_option
@max_content_bytes_option
@click.option("--progress/--no-progress", default=None,
              help="A progress bar (default: when stderr is a terminal).")
@click.option("--max-line-bytes", default=MAX_IMPORT_LINE_BYTES, show_default=True,
              type=click.IntRange(1), help="The longest line read (longer: refused).")
@click.argument("namespace")
@click.argument("file", type=click.File("rb"))
def import_(namespace: str, file: BinaryIO, database_url: str, max_content_bytes: int,
            progress: bool | None, max_line_bytes: int) -> None:
    """Import the nodes of FILE (JSON Lines, '-' for stdin) into NAMESPACE, all or nothing.

    One node a line: {"path": "/a/b", "kind": "dir"|"file", "content": "...",
    "metadata": {...}}, in any order; missing parent directories are created. Any bad
    line and nothing is written: every problem (syntax, a path twice, a file under a
    file, a path that exists) is listed at once, one a line with its line number."""
    from coordinator.api import Coordinator
    from pathkeeper.cli.import_progress import progress_bar


    show = sys.stderr.isatty() if progress is None else progress
    try:
        with (Coordinator.connect(database_url, max_import_line_bytes=max_line_bytes,
                                  max_content_bytes=max_content_bytes) as coord,
              progress_bar(file, show) as on_progress):
            result = coord.import_nodes(namespace, file, progress=on_progress)
    except CoordinatorError as exc:
        if not exc.lines:
            raise
        click.echo("\n".join(refused_import_lines(exc)), err=True)
        sys.exit(EXIT_CANNOT_RUN)
    events = ("no events" if result.first_seq is None
              else f"events {result.first_seq}..{result.last_seq}")
    click.echo(
        f"imported {result.created} nodes ({result.lines} lines, {result.implied_dirs} "
        f"parent directories created) into {namespace} in {result.seconds:.1f} s; {events}"
    )


def refused_import_lines(exc: CoordinatorError) -> list[str]:
    """A refused import for an operator: a header, then each bad line on a line of its
    own (the exception's message has them all on one), then how many more there are."""
    total = max(exc.lines_total, len(exc.lines))
    noun = "bad line" if total == 1 else "bad lines"
    out = [f"error: import refused, nothing written: {total} {noun}:"]
    out += [f"  line {n}: {message}" for n, message in exc.lines]
    if total > len(exc.lines):
        out.append(f"  ... and {total - len(exc.lines)} more")
    return out


for command in (ns, tree, serve, keys, indexer, search_node, replay, reindex, verify, snapshot,
                compact, shard):
    main.add_command(command)
show_envvars(main)
