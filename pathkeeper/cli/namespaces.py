"""``pathkeeper ns create|list|drop`` and ``pathkeeper tree``: namespaces and their trees
from the command line, through the same ``Coordinator`` calls as the APIs."""

from __future__ import annotations

import sys

import click

from pathkeeper.cli.options import database_url_option


@click.group("ns")
def ns() -> None:
    """Namespaces: one tree each."""


@ns.command("create")
@database_url_option
@click.argument("name")
def ns_create(database_url: str, name: str) -> None:
    """Create the namespace NAME (an empty tree)."""
    from coordinator.api import Coordinator

    with Coordinator.connect(database_url) as coord:
        result = coord.create_namespace(name)
    click.echo(f"created namespace {name} (event {result.seq})")


@ns.command("list")
@database_url_option
def ns_list(database_url: str) -> None:
    """List the namespaces, one a line."""
    from coordinator.api import Coordinator

    with Coordinator.connect(database_url) as coord:
        for name in coord.namespaces():
            click.echo(name)


@ns.command("drop")
@database_url_option
@click.option("--force", is_flag=True, help="Drop it with everything in it.")
@click.argument("name")
def ns_drop(database_url: str, name: str, force: bool) -> None:
    """Drop the namespace NAME: refused while it holds anything, unless --force."""
    from coordinator.api import Coordinator
    from coordinator.errors import DirectoryNotEmpty
    from pathkeeper.cli.errors import EXIT_CANNOT_RUN

    with Coordinator.connect(database_url) as coord:
        try:
            result = coord.drop_namespace(name, force=force)
        except DirectoryNotEmpty:
            click.echo(f"error: namespace {name!r} is not empty: --force drops it with "
                       "everything in it", err=True)
            sys.exit(EXIT_CANNOT_RUN)
    click.echo(f"dropped namespace {name} (event {result.seq})")


@click.command("tree")
@database_url_option
@click.argument("namespace")
@click.argument("path", default="/")
def tree(database_url: str, namespace: str, path: str) -> None:
    """Print the tree of NAMESPACE under PATH (default /), one path a line in path order,
    directories with a trailing '/', from one consistent snapshot."""
    from coordinator.api import Coordinator

    with Coordinator.connect(database_url) as coord:
        for node in coord.walk(namespace, path):
            click.echo(node.path.rstrip("/") + "/" if node.is_dir else node.path)


__all__ = ["ns", "tree"]
