"""Options shared by every ``pathkeeper`` command group (a module of its own, so the
groups can import it without importing each other), and how options meet the environment.

Every option can be set by a variable of one prefix, ``PATHKEEPER_``: by default the
command path and the option's name (click's ``auto_envvar_prefix``:
``PATHKEEPER_SERVE_MAX_INFLIGHT`` for ``serve --max-inflight``,
``PATHKEEPER_INDEXER_RUN_PARTITIONS``); the options shared by many commands have one
explicit name for all (``PATHKEEPER_DATABASE_URL``, ``PATHKEEPER_ES_URL``...). ``--help``
shows each option's variable (``show_envvars``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from coordinator.paths import MAX_CONTENT_BYTES
from indexer.contract import DEFAULT_ALIAS

if TYPE_CHECKING:
    from coordinator.api import Coordinator
    from coordinator.shard_map import Shard
    from indexer.contract import IndexShape

if TYPE_CHECKING:
    from indexer.search_client import SearchSecurity

DATABASE_URL_ENV = "PATHKEEPER_DATABASE_URL"
DIRECTORY_URL_ENV = "PATHKEEPER_DIRECTORY_URL"
PLACEMENT_ENV = "PATHKEEPER_PLACEMENT"
ES_URL_ENV = "PATHKEEPER_ES_URL"
MAX_CONTENT_BYTES_ENV = "PATHKEEPER_MAX_CONTENT_BYTES"
LOG_FORMAT_ENV = "PATHKEEPER_LOG_FORMAT"
#: The prefix of every option's variable.
ENV_PREFIX = "PATHKEEPER"
SHARDS_ENV = "PATHKEEPER_INDEX_SHARDS"
REPLICAS_ENV = "PATHKEEPER_INDEX_REPLICAS"
NAMESPACE_SHARDS_ENV = "PATHKEEPER_INDEX_NAMESPACE_SHARDS"
SEARCH_USER_ENV = "PATHKEEPER_SEARCH_USER"
SEARCH_PASSWORD_ENV = "PATHKEEPER_SEARCH_PASSWORD"
SEARCH_PASSWORD_FILE_ENV = "PATHKEEPER_SEARCH_PASSWORD_FILE"
SEARCH_API_KEY_ENV = "PATHKEEPER_SEARCH_API_KEY"
SEARCH_API_KEY_FILE_ENV = "PATHKEEPER_SEARCH_API_KEY_FILE"
SEARCH_CA_CERTS_ENV = "PATHKEEPER_SEARCH_CA_CERTS"
SEARCH_CLOUD_ID_ENV = "PATHKEEPER_SEARCH_CLOUD_ID"

database_url_option = click.option(
    "--database-url",
    envvar=DATABASE_URL_ENV,
    required=True,
    help="libpq or SQLAlchemy URL of the PostgreSQL database.",
)
#: The commands that work on namespaces: on one server (``--database-url``) or on the
#: servers a directory names (``--directory-url``, docs/sharding.md), which wins.
_SERVERS_OPTIONS = (
    click.option("--database-url", envvar=DATABASE_URL_ENV, default=None,
                 help="libpq or SQLAlchemy URL of the PostgreSQL database (one server)."),
    click.option("--directory-url", envvar=DIRECTORY_URL_ENV, default=None,
                 help="URL of the directory database of several servers (it names them "
                      "and where each namespace is); instead of --database-url."),
)


def servers_options(command: _F) -> _F:
    """``--database-url`` and ``--directory-url``; see ``connect_coordinator``."""
    for option in reversed(_SERVERS_OPTIONS):
        command = option(command)
    return command


def connect_coordinator(database_url: str | None, directory_url: str | None,
                        **settings: Any) -> Coordinator:
    """The ``Coordinator`` of ``servers_options``: on the directory's servers if one is
    given (the placement rule from ``PATHKEEPER_PLACEMENT``), else on the one server."""
    import os

    from coordinator.api import Coordinator

    if directory_url:
        placement = os.environ.get(PLACEMENT_ENV)
        if placement:
            settings = {"placement": placement, **settings}
        return Coordinator.connect(directory_url=directory_url, **settings)
    if not database_url:
        raise click.UsageError(
            f"give --database-url (or {DATABASE_URL_ENV}), or --directory-url "
            f"(or {DIRECTORY_URL_ENV})")
    return Coordinator.connect(database_url, **settings)


def servers_shards(database_url: str | None, directory_url: str | None) -> list[Shard]:
    """The shards of ``servers_options``: the directory's (read once), else the one server
    (the shard ``default``)."""
    from coordinator.shard_map import SingleShard

    if directory_url:
        from coordinator.shard_directory import DirectoryMap

        directory = DirectoryMap(directory_url, listen=False)
        try:
            return directory.shards()
        finally:
            directory.close()
    if not database_url:
        raise click.UsageError(
            f"give --database-url (or {DATABASE_URL_ENV}), or --directory-url "
            f"(or {DIRECTORY_URL_ENV})")
    return SingleShard(database_url).shards()


es_url_option = click.option(
    "--es-url",
    envvar=ES_URL_ENV,
    default=None,
    help="The search server's URL, http(s)://host:port; required unless "
         "--search-cloud-id names it.",
)

#: How a secured search server is reached. Secrets: no default, never shown by --help;
#: a file option for each, so that a secret need not sit in the environment.
_SEARCH_SECURITY_OPTIONS = (
    click.option("--search-user", envvar=SEARCH_USER_ENV, default=None, metavar="USER",
                 help="User of the search server, with a password."),
    click.option("--search-password", envvar=SEARCH_PASSWORD_ENV, default=None,
                 metavar="PASSWORD", show_default=False,
                 help="Its password (prefer the file option)."),
    click.option("--search-password-file", envvar=SEARCH_PASSWORD_FILE_ENV, default=None,
                 type=click.Path(dir_okay=False), metavar="FILE",
                 help="Read the password from this file."),
    click.option("--search-api-key", envvar=SEARCH_API_KEY_ENV, default=None, metavar="KEY",
                 show_default=False,
                 help="An API key of the search server instead of a user: its encoded form "
                      "or id:key (prefer the file option)."),
    click.option("--search-api-key-file", envvar=SEARCH_API_KEY_FILE_ENV, default=None,
                 type=click.Path(dir_okay=False), metavar="FILE",
                 help="Read the API key from this file."),
    click.option("--search-ca-certs", envvar=SEARCH_CA_CERTS_ENV, default=None,
                 type=click.Path(dir_okay=False), metavar="PEM",
                 help="CA certificate(s) that sign the search server's TLS certificate "
                      "(default: the system's)."),
    click.option("--search-cloud-id", envvar=SEARCH_CLOUD_ID_ENV, default=None,
                 metavar="CLOUD_ID",
                 help="An Elastic Cloud deployment's id, in place of --es-url."),
)


def _secret(value: str | None, path: str | None, option: str) -> str | None:
    """A secret given as a value or in a file (its first line), not both."""
    if path is None:
        return value
    if value is not None:
        raise click.UsageError(f"give --{option} or --{option}-file, not both")
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise click.UsageError(f"--{option}-file {path}: cannot be read ({reason})") from None
    return lines[0] if lines else ""


def search_security(
    search_user: str | None, search_password: str | None,
    search_password_file: str | None, search_api_key: str | None,
    search_api_key_file: str | None, search_ca_certs: str | None,
    search_cloud_id: str | None,
) -> SearchSecurity:
    """The one ``SearchSecurity`` of the security options' values."""
    from indexer.search_client import SearchSecurity

    return SearchSecurity(
        user=search_user or None,
        password=_secret(search_password, search_password_file, "search-password"),
        api_key=_secret(search_api_key, search_api_key_file, "search-api-key"),
        ca_certs=search_ca_certs or None,
        cloud_id=search_cloud_id or None,
    )


_SECURITY_PARAMS = ("search_user", "search_password", "search_password_file",
                    "search_api_key", "search_api_key_file", "search_ca_certs",
                    "search_cloud_id")


def search_options(*, url_required: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options of a command that reaches the search server: its URL (``--es-url``,
    or ``--search-cloud-id``) and how to reach a secured one. The command gets
    ``es_url`` (the cloud id's endpoint when one is given; None when neither is and
    ``url_required`` is false) and ``search_security``."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            security = search_security(*(kwargs.pop(name) for name in _SECURITY_PARAMS))
            es_url = security.url(kwargs.pop("es_url"))
            if url_required and not es_url:
                raise click.UsageError(
                    f"Missing option '--es-url' (or {ES_URL_ENV}, or --search-cloud-id)"
                )
            return fn(*args, es_url=es_url, search_security=security, **kwargs)

        for option in reversed(_SEARCH_SECURITY_OPTIONS):
            command = option(command)
        return es_url_option(command)

    return decorate
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
