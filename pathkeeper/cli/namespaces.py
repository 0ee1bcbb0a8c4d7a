"""``pathkeeper ns create|list|drop`` and ``pathkeeper tree``: namespaces and their trees
from the command line, through the same ``Coordinator`` calls as the APIs."""

from __future__ import annotations

import sys

import click

from pathkeeper.cli.options import connect_coordinator, servers_options


@click.group("ns")
def ns() -> None:
    """Namespaces: one tree each."""


@ns.command("create")
@servers_options
@click.option("--shard", default=None, metavar="NAME",
              help="With a directory: the server to create it on (default: the placement "
                   "rule, PATHKEEPER_PLACEMENT).")
@click.argument("name")
def ns_create(database_url: str | None, directory_url: str | None, shard: str | None,
              name: str) -> None:
    """Create the namespace NAME (an empty tree)."""
    with connect_coordinator(database_url, directory_url) as coord:
        result = coord.create_namespace(name, shard)
    click.echo(f"created namespace {name} (event {result.seq})")


@ns.command("list")
@servers_options
def ns_list(database_url: str | None, directory_url: str | None) -> None:
    """List the namespaces, one a line."""
    with connect_coordinator(database_url, directory_url) as coord:
        for name in coord.namespaces():
            click.echo(name)


@ns.command("drop")
@servers_options
@click.option("--force", is_flag=True, help="Drop it with everything in it.")
@click.argument("name")
def ns_drop(database_url: str | None, directory_url: str | None, name: str,
            force: bool) -> None:
    """Drop the namespace NAME: refused while it holds anything, unless --force."""
    from coordinator.errors import DirectoryNotEmpty
    from pathkeeper.cli.errors import EXIT_CANNOT_RUN

    with connect_coordinator(database_url, directory_url) as coord:
        try:
            result = coord.drop_namespace(name, force=force)
        except DirectoryNotEmpty:
            click.echo(f"error: namespace {name!r} is not empty: --force drops it with "
                       "everything in it", err=True)
            sys.exit(EXIT_CANNOT_RUN)
    click.echo(f"dropped namespace {name} (event {result.seq})")


@click.command("tree")
@servers_options
@click.argument("namespace")
@click.argument("path", default="/")
def tree(database_url: str | None, directory_url: str | None, namespace: str,
         path: str) -> None:
    """Print the tree of NAMESPACE under PATH (default /), one path a line in path order,
    directories with a trailing '/', from one consistent snapshot."""
    with connect_coordinator(database_url, directory_url) as coord:
        for node in coord.walk(namespace, path):
            click.echo(node.path.rstrip("/") + "/" if node.is_dir else node.path)


__all__ = ["ns", "tree"]
