"""Options shared by every ``pathkeeper`` command group (a module of its own, so the
groups can import it without importing each other), and how options meet the environment.

Every option can be set by a variable of one prefix, ``PATHKEEPER_``: by default the
command path and the option's name (click's ``auto_envvar_prefix``:
``PATHKEEPER_SERVE_MAX_INFLIGHT`` for ``serve --max-inflight``,
``PATHKEEPER_INDEXER_RUN_PARTITIONS``); the options shared by many commands have one
explicit name for all (``PATHKEEPER_DATABASE_URL``, ``PATHKEEPER_ES_URL``...). ``--help``
shows each option's variable (``show_envvars``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

import click

from coordinator.paths import MAX_CONTENT_BYTES
from indexer.contract import DEFAULT_ALIAS

if TYPE_CHECKING:
    from indexer.contract import IndexShape

DATABASE_URL_ENV = "PATHKEEPER_DATABASE_URL"
ES_URL_ENV = "PATHKEEPER_ES_URL"
MAX_CONTENT_BYTES_ENV = "PATHKEEPER_MAX_CONTENT_BYTES"
LOG_FORMAT_ENV = "PATHKEEPER_LOG_FORMAT"
#: The prefix of every option's variable.
ENV_PREFIX = "PATHKEEPER"
SHARDS_ENV = "PATHKEEPER_INDEX_SHARDS"
REPLICAS_ENV = "PATHKEEPER_INDEX_REPLICAS"
NAMESPACE_SHARDS_ENV = "PATHKEEPER_INDEX_NAMESPACE_SHARDS"

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


_F = TypeVar("_F", bound=Callable[..., object])


def index_shape_options(when: str) -> Callable[[_F], _F]:
    """``--shards``, ``--replicas`` and ``--namespace-shards``: the shape of an index
    the command creates (``when`` says what happens when they are left out). The
    README's "Index shape" section has the reasoning for the defaults."""
    def decorate(f: _F) -> _F:
        f = click.option(
            "--namespace-shards", type=click.IntRange(min=1), envvar=NAMESPACE_SHARDS_ENV,
            default=None, help="Shards one namespace's documents spread over: 1 (the "
            "default) keeps a namespace in one shard, so its searches ask one shard; more "
            "spreads a big namespace (its searches ask that many); fewer than --shards.")(f)
        f = click.option(
            "--replicas", type=click.IntRange(min=0), envvar=REPLICAS_ENV, default=None,
            help="Copies of each shard on other nodes: 0 (the default) suits a single "
            "node; 1 on a cluster survives the loss of a node.")(f)
        f = click.option(
            "--shards", type=click.IntRange(min=1), envvar=SHARDS_ENV, default=None,
            help=f"Primary shards of the index (default 1). {when}")(f)
        return f
    return decorate


def index_shape(
    shards: int | None, replicas: int | None, namespace_shards: int | None,
    base: IndexShape | None = None,
) -> IndexShape | None:
    """The shape the shape options ask for, each one left out taken from ``base`` (else
    the default shape); None when all are left out. A shape the server would refuse is
    a usage error naming the options."""
    from indexer.contract import DEFAULT_SHAPE, IndexShape

    if shards is None and replicas is None and namespace_shards is None:
        return base
    base = base or DEFAULT_SHAPE
    try:
        return IndexShape(
            base.shards if shards is None else shards,
            base.replicas if replicas is None else replicas,
            base.namespace_shards if namespace_shards is None else namespace_shards,
        )
    except ValueError as exc:
        raise click.UsageError(f"--shards/--namespace-shards: {exc}") from exc


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
