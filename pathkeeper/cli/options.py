"""Options shared by every ``pathkeeper`` command group (a module of its own, so the
groups can import it without importing each other)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from coordinator.paths import MAX_CONTENT_BYTES

if TYPE_CHECKING:
    from indexer.search_client import SearchSecurity

DATABASE_URL_ENV = "PATHKEEPER_DATABASE_URL"
ES_URL_ENV = "PATHKEEPER_ES_URL"
MAX_CONTENT_BYTES_ENV = "PATHKEEPER_MAX_CONTENT_BYTES"
LOG_FORMAT_ENV = "PATHKEEPER_LOG_FORMAT"
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
    help=f"libpq or SQLAlchemy URL of the PostgreSQL database (env {DATABASE_URL_ENV}).",
)
es_url_option = click.option(
    "--es-url",
    envvar=ES_URL_ENV,
    default=None,
    help=f"The search server's URL, http(s)://host:port (env {ES_URL_ENV}); "
         "required unless --search-cloud-id names it.",
)

#: How a secured search server is reached. Secrets: no default, never shown by --help;
#: a file option for each, so that a secret need not sit in the environment.
_SEARCH_SECURITY_OPTIONS = (
    click.option("--search-user", envvar=SEARCH_USER_ENV, default=None, metavar="USER",
                 help=f"User of the search server, with a password (env {SEARCH_USER_ENV})."),
    click.option("--search-password", envvar=SEARCH_PASSWORD_ENV, default=None,
                 metavar="PASSWORD", show_default=False,
                 help=f"Its password (env {SEARCH_PASSWORD_ENV}; prefer the file option)."),
    click.option("--search-password-file", envvar=SEARCH_PASSWORD_FILE_ENV, default=None,
                 type=click.Path(dir_okay=False), metavar="FILE",
                 help=f"Read the password from this file (env {SEARCH_PASSWORD_FILE_ENV})."),
    click.option("--search-api-key", envvar=SEARCH_API_KEY_ENV, default=None, metavar="KEY",
                 show_default=False,
                 help="An API key of the search server instead of a user: its encoded form "
                      f"or id:key (env {SEARCH_API_KEY_ENV}; prefer the file option)."),
    click.option("--search-api-key-file", envvar=SEARCH_API_KEY_FILE_ENV, default=None,
                 type=click.Path(dir_okay=False), metavar="FILE",
                 help=f"Read the API key from this file (env {SEARCH_API_KEY_FILE_ENV})."),
    click.option("--search-ca-certs", envvar=SEARCH_CA_CERTS_ENV, default=None,
                 type=click.Path(dir_okay=False), metavar="PEM",
                 help="CA certificate(s) that sign the search server's TLS certificate "
                      f"(default: the system's; env {SEARCH_CA_CERTS_ENV})."),
    click.option("--search-cloud-id", envvar=SEARCH_CLOUD_ID_ENV, default=None,
                 metavar="CLOUD_ID",
                 help="An Elastic Cloud deployment's id, in place of --es-url "
                      f"(env {SEARCH_CLOUD_ID_ENV})."),
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
         f"write path, and the indexer checks that it fits the search server's request "
         f"limit (env {MAX_CONTENT_BYTES_ENV}).",
)


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
