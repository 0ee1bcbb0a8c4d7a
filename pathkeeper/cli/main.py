"""The ``pathkeeper`` command line: a thin entry point over the coordinator and indexer.

The root group holds ``db``, ``demo`` and ``import``; the other commands live in the
sibling modules (``serve``, ``indexer``, ``replay``, ``retention``) and are added here.
Each module imports what a command needs inside the command, so ``pathkeeper --help``
does not import FastAPI, Elasticsearch or the worker.
"""

from __future__ import annotations

import sys
from typing import BinaryIO

import click

from pathkeeper.cli.errors import OperatorErrors
from pathkeeper.cli.indexer import indexer, search_node
from pathkeeper.cli.options import (
    DATABASE_URL_ENV,
    ES_URL_ENV,
    database_url_option,
    max_content_bytes_option,
)
from pathkeeper.cli.replay import reindex, replay, verify
from pathkeeper.cli.retention import compact, snapshot
from pathkeeper.cli.serve import keys, serve


@click.group(cls=OperatorErrors)
def main() -> None:
    """Pathkeeper: transactional trees in PostgreSQL, searchable in Elasticsearch."""


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
    click.echo(f"database upgraded to {revision}")


@db.command("downgrade")
@database_url_option
@click.argument("revision")
def db_downgrade(database_url: str, revision: str) -> None:
    """Revert migrations down to REVISION (e.g. base)."""
    from coordinator.migrate import downgrade

    downgrade(database_url, revision)
    click.echo(f"database downgraded to {revision}")


@main.command()
@click.option("--database-url", envvar=DATABASE_URL_ENV, default=None,
              help="Use this database instead of starting a throwaway local cluster.")
@click.option("--es-url", envvar=ES_URL_ENV, default=None,
              help="Use this Elasticsearch instead of starting a local node "
                   "(PATHKEEPER_SEARCH=noida: the stand-in).")
@click.option("--clients", default=8, show_default=True)
@click.option("--seconds", default=3.0, show_default=True)
@click.option("--serve/--no-serve", default=None,
              help="Keep serving the API afterwards (default: when run on a terminal).")
def demo(
    database_url: str | None, es_url: str | None, clients: int, seconds: float,
    serve: bool | None,
) -> None:
    """The main job on embedded defaults: concurrent renames, indexed and searched."""
    from pathkeeper.demo import run_demo

    sys.exit(run_demo(database_url, es_url, clients, seconds, serve))


@main.command("import")
@database_url_option
@max_content_bytes_option
@click.option("--progress/--no-progress", default=None,
              help="A progress bar (default: when stderr is a terminal).")
@click.argument("namespace")
@click.argument("file", type=click.File("rb"))
def import_(namespace: str, file: BinaryIO, database_url: str, max_content_bytes: int,
            progress: bool | None) -> None:
    """Import the nodes of FILE (JSON Lines, '-' for stdin) into NAMESPACE, all or nothing.

    One node a line: {"path": "/a/b", "kind": "dir"|"file", "content": "...",
    "metadata": {...}}, in any order; missing parent directories are created. Any bad
    line (reported with its number) and nothing is written."""
    from coordinator.api import Coordinator
    from pathkeeper.cli.import_progress import progress_bar

    show = sys.stderr.isatty() if progress is None else progress
    with (Coordinator.connect(database_url, max_content_bytes=max_content_bytes) as coord,
          progress_bar(file, show) as on_progress):
        result = coord.import_nodes(namespace, file, progress=on_progress)
    click.echo(
        f"imported {result.created} nodes ({result.lines} lines, {result.implied_dirs} "
        f"parent directories created) into {namespace} in {result.seconds:.1f} s; "
        f"events {result.first_seq}..{result.last_seq}"
    )


for command in (serve, keys, indexer, search_node, replay, reindex, verify, snapshot, compact):
    main.add_command(command)
