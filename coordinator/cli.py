"""The ``pathkeeper`` command line: a thin entry point over the coordinator and indexer.

Each component registers its own command group at the bottom of this file.
"""

from __future__ import annotations

import sys

import click

from .cli_options import DATABASE_URL_ENV, ES_URL_ENV, database_url_option


@click.group()
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
    from .migrate import upgrade

    upgrade(database_url, revision)
    click.echo(f"database upgraded to {revision}")


@db.command("downgrade")
@database_url_option
@click.argument("revision")
def db_downgrade(database_url: str, revision: str) -> None:
    """Revert migrations down to REVISION (e.g. base)."""
    from .migrate import downgrade

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
    from .demo import run_demo

    sys.exit(run_demo(database_url, es_url, clients, seconds, serve))


def _register() -> None:
    """Command groups of the other components."""
    from .service.cli import keys, serve  # HTTP API (issue 5)
    main.add_command(serve)
    main.add_command(keys)
    from indexer.cli import indexer  # indexer worker (issue 3)
    main.add_command(indexer)
    from indexer.replay_cli import reindex, replay, verify  # replay/reindex/verify (issue 4)
    main.add_command(replay)
    main.add_command(reindex)
    main.add_command(verify)
    from indexer.retention_cli import compact, snapshot  # snapshots, compaction (issue 14)
    main.add_command(snapshot)
    main.add_command(compact)


_register()
