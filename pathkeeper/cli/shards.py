"""``pathkeeper shard init|add|list|check``: a directory of database servers
(docs/sharding.md): made from the one server there is, servers added, listed, and what
the directory and the servers disagree on. The ``shard`` group is the home of every
command on shards (a namespace's move among them)."""

from __future__ import annotations

import sys

import click

from pathkeeper.cli.options import DATABASE_URL_ENV, DIRECTORY_URL_ENV
from pathkeeper.cli.shard_move import move

directory_url_option = click.option(
    "--directory-url", envvar=DIRECTORY_URL_ENV, required=True,
    help="URL of the directory database.")


@click.group("shard")
def shard() -> None:
    """Several database servers: the directory that names them, and where each
    namespace is."""


@shard.command("init")
@directory_url_option
@click.option("--database-url", envvar=DATABASE_URL_ENV, required=True,
              help="The server there is now: it becomes the shard 'default'.")
@click.option("--store-url", default=None, metavar="URL",
              help="The URL to record for it in the directory, e.g. "
                   "env:PATHKEEPER_DATABASE_URL to read it from that variable when used "
                   "(default: --database-url as given, password included).")
def shard_init(directory_url: str, database_url: str, store_url: str | None) -> None:
    """Make the directory from the current server: every namespace placed on 'default',
    the API keys copied. Then add servers with 'shard add', and run every process with
    PATHKEEPER_DIRECTORY_URL."""
    from coordinator.shard_admin import init_directory

    placed = init_directory(directory_url, database_url, store_url)
    click.echo(f"directory made: shard default with {placed} namespace(s)")


@shard.command("add")
@directory_url_option
@click.argument("name")
@click.argument("url")
def shard_add(directory_url: str, name: str, url: str) -> None:
    """Add the server at URL as the shard NAME (URL as given, or env:VARIABLE). Its schema
    must be migrated to the others' revision, and hold no namespace."""
    from coordinator.shard_admin import add_shard

    revision = add_shard(directory_url, name, url)
    click.echo(f"added shard {name} (schema at {revision})")


@shard.command("list")
@directory_url_option
def shard_list(directory_url: str) -> None:
    """The shards, under a header line: name, whether it takes new namespaces, how many
    it holds, and its URL (without a password)."""
    from coordinator.db import parse_database_url
    from coordinator.shard_directory import DirectoryMap
    from coordinator.shard_map import URL_FROM_ENV

    with DirectoryMap(directory_url, listen=False) as directory:
        infos = directory.shard_infos()
    rows = [("name", "new", "namespaces", "url")] + [
        (i.shard.name, "yes" if i.accepts_new else "no", str(i.namespaces),
         i.shard.url if i.shard.url.startswith(URL_FROM_ENV)
         else parse_database_url(i.shard.url).render_as_string(hide_password=True))
        for i in infos]
    widths = [max(len(cell) for cell in column) for column in zip(*rows, strict=True)]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                   .rstrip())


@shard.command("check")
@directory_url_option
def shard_check(directory_url: str) -> None:
    """List what the directory and the shards disagree on, one a line (exit 1 if
    anything): a namespace placed on a shard that lacks it, one on a shard with no
    directory row or placed elsewhere. Namespaces of a move in flight are left out."""
    from coordinator.shard_admin import check

    found = check(directory_url)
    for finding in found:
        click.echo(str(finding))
    if found:
        sys.exit(1)
    click.echo("the directory and the shards agree")


__all__ = ["shard"]


shard.add_command(move)
