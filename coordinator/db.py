"""The PostgreSQL adapter: database URLs, the engine, and what a driver error means.

Every SQLSTATE the coordinator acts on is named here, and ``translate`` is the one
place a driver error becomes a typed ``CoordinatorError``; code above this module
catches our errors, not the driver's (a site that must tell two failures apart, such
as a unique violation that means "run again", compares ``sqlstate`` with these names).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError

from .errors import (
    AlreadyExists,
    Conflict,
    CoordinatorError,
    InvalidConfiguration,
    InvalidName,
    NotFound,
    NotMigrated,
    Unavailable,
)
from .settings import Settings

UNIQUE_VIOLATION = "23505"
FOREIGN_KEY_VIOLATION = "23503"
LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout
QUERY_CANCELED = "57014"  # statement_timeout
#: A re-run of the whole transaction resolves these.
RETRYABLE = frozenset({"40001", "40P01"})  # serialization failure, deadlock detected
#: Values the database refuses as a name, content or number.
INVALID_VALUE = frozenset({"23514", "22021", "22P05", "22P02"})
#: Undefined table or column: our schema is missing or older than the code. (Not an
#: undefined function: that is more likely a PostgreSQL older than the code supports.)
SCHEMA_MISSING = frozenset({"42P01", "42703"})

UPGRADE_HINT = "run `pathkeeper db upgrade` (with the same --database-url)"
URL_HINT = "expected postgresql://user[:password]@host[:port]/database"


def sqlalchemy_url(url: str) -> str:
    """Accept libpq URLs (postgresql://) and SQLAlchemy ones (postgresql+psycopg://)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def libpq_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def parse_database_url(database_url: object) -> URL:
    """The SQLAlchemy URL of a PostgreSQL database, or ``InvalidConfiguration``.

    The message never repeats the URL: it may hold a password."""
    if not isinstance(database_url, str) or not database_url.strip():
        raise InvalidConfiguration(f"the database URL is empty; {URL_HINT}")
    try:
        url = make_url(sqlalchemy_url(database_url))
    except (ArgumentError, ValueError) as exc:
        reason = "its port is not a number" if isinstance(exc, ValueError) else "not a URL"
        raise InvalidConfiguration(
            f"the database URL cannot be parsed ({reason}); {URL_HINT}"
        ) from None
    if url.get_backend_name() != "postgresql":
        raise InvalidConfiguration(
            f"the database URL is for {url.get_backend_name()!r}, not PostgreSQL; {URL_HINT}"
        )
    return url


def connect_engine(database_url: str, s: Settings) -> Engine:
    """The coordinator's pooled engine, with the session limits of ``s``."""
    options = (
        f"-c lock_timeout={int(s.lock_timeout * 1000)} "
        f"-c idle_in_transaction_session_timeout={int(s.idle_in_transaction_timeout * 1000)} "
        # Notice a vanished client while its query runs, not only when it next writes.
        "-c client_connection_check_interval=2000"
    )
    return create_engine(
        parse_database_url(database_url),
        pool_size=s.pool_size,
        max_overflow=s.max_overflow,
        pool_timeout=s.pool_timeout,
        # No pre-ping: it was a round trip on every checkout (one of ten for a
        # rename). ``Coordinator.run`` re-runs a transaction whose connection turns out
        # dead before COMMIT instead, which is as transparent after a server restart.
        pool_pre_ping=False,
        connect_args={
            "options": options,
            "connect_timeout": max(1, int(s.connect_timeout)),
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
            "application_name": "pathkeeper",
        },
    )


def set_statement_timeout(engine: Engine, seconds: float) -> None:
    """Every new connection of ``engine`` cancels a statement after ``seconds`` (an
    answering service bounds its requests; the worker and CLI commands do not)."""
    ms = max(1, int(seconds * 1000))

    @event.listens_for(engine, "connect")
    def _set_timeout(dbapi_conn: Any, _record: Any) -> None:
        # SET is transactional: commit it, or the pool's reset would undo it.
        with dbapi_conn.cursor() as cur:
            cur.execute(f"SET statement_timeout = {ms}")
        dbapi_conn.commit()


def sqlstate(exc: BaseException) -> str:
    """The SQLSTATE of a driver error (SQLAlchemy's wrapper or psycopg's own), or ""."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    return getattr(orig, "sqlstate", None) or ""


def is_retryable(exc: BaseException) -> bool:
    """A deadlock or serialization failure: the whole transaction may run again."""
    return sqlstate(exc) in RETRYABLE


def translate(
    exc: DBAPIError, messages: Mapping[type[CoordinatorError], str] | None = None
) -> CoordinatorError:
    """The typed error for a driver error. ``messages`` replaces the database's wording
    for the errors a caller can say better (``{AlreadyExists: "/a/b already exists"}``)."""
    state = sqlstate(exc)
    diag = getattr(exc.orig, "diag", None)
    detail = str(getattr(diag, "message_primary", None) or exc.orig)
    error = _typed(exc, state, detail)
    better = (messages or {}).get(type(error))
    return type(error)(better) if better is not None else error


def _typed(exc: DBAPIError, state: str, detail: str) -> CoordinatorError:
    if state == LOCK_NOT_AVAILABLE:
        return Conflict(f"lock wait timed out: {detail}")
    if state == UNIQUE_VIOLATION:
        return AlreadyExists(detail)
    if state == FOREIGN_KEY_VIOLATION:
        return NotFound(detail)
    if state in INVALID_VALUE:
        return InvalidName(detail)
    if state in RETRYABLE:
        return Conflict(f"gave up after repeated conflicts: {detail}")
    if state in SCHEMA_MISSING:
        return NotMigrated(f"the database is not migrated ({detail}): {UPGRADE_HINT}")
    if state == QUERY_CANCELED:
        return Unavailable(f"statement timed out: {detail}")
    # A failed connection attempt has no SQLSTATE (the server never answered).
    no_answer = isinstance(exc, OperationalError) and not state
    if exc.connection_invalidated or no_answer or state.startswith(("08", "57P")):
        return Unavailable(f"database unavailable: {detail}")
    return CoordinatorError(f"database error {state}: {detail}")
