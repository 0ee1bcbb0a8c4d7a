"""``pathkeeper serve`` and ``pathkeeper keys create|revoke|list``."""

from __future__ import annotations

import ipaddress
import logging
import os
import sys
from typing import TYPE_CHECKING

import click

from coordinator.settings import MAX_IMPORT_LINE_BYTES
from indexer.contract import DEFAULT_ALIAS
from pathkeeper.cli.options import (
    DATABASE_URL_ENV,
    connect_coordinator,
    max_content_bytes_option,
    search_options,
    servers_options,
)

if TYPE_CHECKING:
    from indexer.search_client import SearchSecurity


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command()
@servers_options
@search_options(url_required=False)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535))
@click.option("--no-auth", is_flag=True,
              help="Disable API keys (local development; refused on a non-loopback host).")
@click.option("--index-alias", default=DEFAULT_ALIAS, show_default=True)
@click.option("--max-inflight", default=64, show_default=True, type=int,
              help="Requests in flight (long polls apart); more get 429.")
@click.option("--max-inflight-per-key", default=16, show_default=True, type=int,
              help="Of those, for one API key.")
@click.option("--max-long-polls", default=64, show_default=True, type=int,
              help="Long polls open (change feed wait, /v1/indexed, search min_seq).")
@click.option("--max-long-polls-per-key", default=8, show_default=True, type=int,
              help="Of those, for one API key.")
@click.option("--statement-timeout", default=10.0, show_default=True, type=float,
              metavar="SECONDS", help="Seconds a request's statement may run (503 beyond).")
@click.option("--body-timeout", default=30.0, show_default=True,
              type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Seconds a request body may take to arrive (an import's: between two "
                   "chunks); then 408 and the connection is closed.")
@click.option("--import-timeout", default=3600.0, show_default=True,
              type=click.FloatRange(0, min_open=True), metavar="SECONDS",
              help="Seconds an import may take, its upload included (503 beyond).")
@click.option("--max-import-line-bytes", default=MAX_IMPORT_LINE_BYTES, show_default=True,
              type=click.IntRange(1), help="The longest line an import reads (413 beyond).")
@max_content_bytes_option
@click.option("--idempotency-ttl", default=24 * 3600.0, show_default=True, type=float,
              metavar="SECONDS",
              help="Seconds an Idempotency-Key is remembered.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
@click.option("--access-log", is_flag=True,
              help="Log every request (client, method, path, status) at INFO.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Server processes on the port, each listening on a socket of its own "
                   "(the kernel spreads connections over them): HTTP throughput grows with "
                   "cores. Each has its own pool and its own in-flight caps.")
def serve(
    database_url: str | None, directory_url: str | None, es_url: str | None,
    search_security: SearchSecurity,
    host: str, port: int, no_auth: bool,
    index_alias: str, max_inflight: int, max_inflight_per_key: int, max_long_polls: int,
    max_long_polls_per_key: int, statement_timeout: float, body_timeout: float,
    import_timeout: float, max_import_line_bytes: int, max_content_bytes: int,
    idempotency_ttl: float, log_level: str, access_log: bool, workers: int,
) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json, docs at /docs)."""
    import uvicorn

    from indexer.logs import configure
    from pathkeeper.cli.workers import serve_workers
    from pathkeeper.http.app import create_app
    from pathkeeper.http.settings import SETTINGS_ENV, ServiceSettings, settings_to_json

    if directory_url:
        _require_directory(directory_url)
    elif database_url:
        _require_schema(database_url)
    else:
        raise click.UsageError("give --database-url (or PATHKEEPER_DATABASE_URL), or "
                               "--directory-url (or PATHKEEPER_DIRECTORY_URL)")
    configure(getattr(logging, log_level.upper()))
    if no_auth and not is_loopback(host):
        raise click.UsageError(
            f"--no-auth is refused when serving on {host}: bind to 127.0.0.1 or use API keys"
        )
    settings = ServiceSettings(
        database_url=database_url, directory_url=directory_url or None, es_url=es_url,
        search_security=search_security,
        index_alias=index_alias, auth=not no_auth,
        max_inflight=max_inflight, max_inflight_per_key=max_inflight_per_key,
        max_long_polls=max_long_polls, max_long_polls_per_key=max_long_polls_per_key,
        statement_timeout_seconds=statement_timeout, body_timeout_seconds=body_timeout,
        import_timeout_seconds=import_timeout,
        idempotency_ttl_seconds=idempotency_ttl,
    ).with_coordinator(max_import_line_bytes=max_import_line_bytes,
                       max_content_bytes=max_content_bytes)
    # With --no-auth the app logs its warning (in the one log format, on stderr).
    click.echo(f"serving on http://{host}:{port}  (docs: http://{host}:{port}/docs)")
    auth_header = "" if no_auth else "-H 'Authorization: Bearer <key>' "
    click.echo(f"try: curl {auth_header}http://{host}:{port}/v1/namespaces")
    if workers == 1:
        # log_config=None: uvicorn's loggers go through the one setup above.
        uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level,
                    access_log=access_log, log_config=None)
        return
    # Worker processes build their own app (a pool and threads cannot cross a fork):
    # they find the settings in the environment they inherit.
    os.environ[SETTINGS_ENV] = settings_to_json(settings)
    try:
        status = serve_workers(host, port, workers, log_level, access_log)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    if status:
        raise SystemExit(status)


def _require_schema(database_url: str) -> None:
    """Refuse to start on a database this code cannot use (never migrated, behind, or
    ahead), as the worker does, rather than answer every request with an error. A database
    that does not answer yet is no reason not to start: requests get 503 until it does."""
    from sqlalchemy import create_engine, pool

    from coordinator.db import parse_database_url
    from coordinator.errors import NotMigrated, Unavailable
    from coordinator.migrate import require_current
    from pathkeeper.cli.errors import describe

    engine = create_engine(parse_database_url(database_url), poolclass=pool.NullPool)
    try:
        require_current(engine)
    except NotMigrated:
        raise
    except Unavailable as exc:
        click.echo(f"warning: {describe(exc)}; serving anyway (503 until it answers)",
                   err=True)
    finally:
        engine.dispose()


def _require_directory(directory_url: str) -> None:
    """``_require_schema`` for each server a directory names."""
    from coordinator.shard_directory import DirectoryMap

    with DirectoryMap(directory_url, listen=False) as directory:
        urls = [shard.database_url() for shard in directory.shards()]
    for url in urls:
        _require_schema(url)


@click.group()
def keys() -> None:
    """API keys for the HTTP API."""


@keys.command("create")
@servers_options
@click.option("--namespace", "namespaces", multiple=True, required=True,
              help="A namespace the key may use (repeat; '*' for all).")
@click.option("--scope", type=click.Choice(["read", "write", "admin"]), required=True)
@click.option("--label", default="", help="A note to recognise the key by.")
def keys_create(database_url: str | None, directory_url: str | None,
                namespaces: tuple[str, ...], scope: str, label: str) -> None:
    """Create a key and print its secret (shown once; only a hash is stored). With a
    directory, keys live there (a key may name namespaces of several servers)."""
    from coordinator.api_keys import ALL, create_key

    with connect_coordinator(database_url, directory_url) as coord:
        try:
            key_id, secret = create_key(coord.keys_engine, list(namespaces), scope, label)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc
        unknown = sorted(set(namespaces) - {ALL, *coord.namespaces()})
    for name in unknown:  # a tenant may get its key first, but a typo should show
        click.echo(f"warning: no namespace {name!r} (yet): the key can use it once it is "
                   "created", err=True)
    click.echo(f"id:     {key_id}")
    click.echo(f"secret: {secret}")
    click.echo("The secret is shown only now; store it safely.", err=True)


@keys.command("revoke")
@servers_options
@click.argument("key_id")
def keys_revoke(database_url: str | None, directory_url: str | None, key_id: str) -> None:
    """Revoke a key by id (takes effect within the server's auth cache time)."""
    from coordinator.api_keys import revoke_key

    with connect_coordinator(database_url, directory_url) as coord:
        if not revoke_key(coord.keys_engine, key_id):
            click.echo(f"no active key {key_id}", err=True)
            sys.exit(1)
    click.echo(f"revoked {key_id}")


@keys.command("list")
@servers_options
def keys_list(database_url: str | None, directory_url: str | None) -> None:
    """List keys (never their secrets), under a header line."""
    from coordinator.api_keys import list_keys

    with connect_coordinator(database_url, directory_url) as coord:
        listed = list_keys(coord.keys_engine)
    rows = [("id", "scope", "namespaces", "state", "label")] + [
        (k.id, k.scope, ",".join(k.namespaces),
         f"revoked {k.revoked_at:%Y-%m-%d %H:%M}" if k.revoked_at else "active", k.label)
        for k in listed]
    widths = [max(len(cell) for cell in column) for column in zip(*rows, strict=True)]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                   .rstrip())


__all__ = ["DATABASE_URL_ENV", "keys", "serve"]
