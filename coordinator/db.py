"""The PostgreSQL adapter: database URLs, the engine, and what a driver error means.

Every SQLSTATE the coordinator acts on is named here, and ``translate`` is the one
place a driver error becomes a typed ``CoordinatorError``; code above this module
catches our errors, not the driver's (a site that must tell two failures apart, such
as a unique violation that means "run again", compares ``sqlstate`` with these names).
"""

from __future__ import annotations

import select
from collections.abc import Generator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg.conninfo
from psycopg.rows import namedtuple_row
from sqlalchemy import Connection, Engine, Row, TextClause, create_engine, text
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError
from sqlalchemy.pool import PoolProxiedConnection

from .errors import (
    AlreadyExists,
    Conflict,
    CoordinatorError,
    DirectoryNotEmpty,
    InvalidArgument,
    InvalidConfiguration,
    InvalidMove,
    InvalidName,
    IsADirectory,
    NamespaceFrozen,
    NamespaceMoved,
    NotADirectory,
    NotFound,
    NotMigrated,
    OutcomeUnknown,
    TooLarge,
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
#: Undefined table or column: our schema is missing or older than the code. (Not any
#: undefined function: that is more likely a PostgreSQL older than the code supports;
#: but a missing one of ours, named ``SERVER_FUNCTIONS``..., is the schema again.)
SCHEMA_MISSING = frozenset({"42P01", "42703"})
UNDEFINED_FUNCTION = "42883"
#: The prefix of the server-side functions that migrations create.
SERVER_FUNCTIONS = "pathkeeper_"

#: Raised by the server-side functions (``coordinator/sql/fn_*.sql``; a class of our own,
#: "PK"), each with the message the caller sees; a path's are ``fn_walk_path``'s.
SERVER_NOT_FOUND = "PK001"
SERVER_NOT_A_DIRECTORY = "PK002"
SERVER_INVALID_MOVE = "PK003"
SERVER_CONFLICT = "PK004"
SERVER_NOT_EMPTY = "PK005"
SERVER_IS_A_DIRECTORY = "PK006"
SERVER_INVALID_ARGUMENT = "PK007"
SERVER_TOO_LARGE = "PK008"
SERVER_NAMESPACE_FROZEN = "PK009"
SERVER_NAMESPACE_MOVED = "PK010"


UPGRADE_HINT = "run `pathkeeper db upgrade` (with the same --database-url)"
URL_HINT = (
    "expected postgresql://user[:password]@host[:port][,host[:port]...]/database"
    " or libpq's key=value form (host=a,b,c ...)"
)


def sqlalchemy_url(url: str) -> str:
    """Any accepted form of a database URL as SQLAlchemy's (``postgresql+psycopg://``):
    a libpq URL (``postgresql://``), one naming several hosts (``postgresql://h1:p1,
    h2:p2/db?target_session_attrs=read-write``), libpq's key=value form (``host=a,b,c
    port=... dbname=...``), or SQLAlchemy's own (several hosts as repeated ``host=h:p``
    query parameters). Several hosts become SQLAlchemy's repeated ``host`` parameters,
    which it hands to libpq as its own lists: libpq tries them in order, and with
    ``target_session_attrs=read-write`` connects to the one that accepts writes (the
    primary, wherever a failover put it)."""
    stripped = url.strip()
    if _several_hosts(stripped) or ("=" in stripped and "://" not in stripped):
        return _from_conninfo(stripped).render_as_string(hide_password=False)
    for prefix in ("postgresql://", "postgres://"):
        if stripped.startswith(prefix):
            return "postgresql+psycopg://" + stripped[len(prefix):]
    return stripped


def _several_hosts(url: str) -> bool:
    """A libpq URL whose host part lists several hosts."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            authority = url[len(prefix):].split("/", 1)[0].split("?", 1)[0]
            return "," in authority.rsplit("@", 1)[-1]
    return False


def _from_conninfo(conninfo: str) -> URL:
    """The SQLAlchemy URL of a libpq connection string (URL or key=value), as libpq
    itself parses it."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.Error:
        raise InvalidConfiguration(f"the database URL cannot be parsed; {URL_HINT}") from None
    hosts = str(params.pop("host", "") or "").split(",")
    ports = str(params.pop("port", "") or "").split(",")
    if len(ports) == 1:
        ports *= len(hosts)
    if len(ports) != len(hosts):
        raise InvalidConfiguration(
            f"the database URL names {len(hosts)} hosts but {len(ports)} ports; {URL_HINT}")
    if any(p and not p.isdigit() for p in ports):
        raise InvalidConfiguration(
            f"the database URL cannot be parsed (its port is not a number); {URL_HINT}")
    user, password, dbname = (params.pop(k, None) for k in ("user", "password", "dbname"))
    query = {k: str(v) for k, v in params.items() if v is not None}
    # A socket directory (``/run/postgresql``) cannot be a URL's host: a query parameter.
    single = len(hosts) == 1 and not hosts[0].startswith("/")
    pairs = tuple(f"{h}:{p}" if p else h for h, p in zip(hosts, ports, strict=True))
    return URL.create(
        "postgresql+psycopg",
        username=str(user) if user is not None else None,
        password=str(password) if password is not None else None,
        host=(hosts[0] or None) if single else None,
        port=int(ports[0]) if single and ports[0] else None,
        database=str(dbname) if dbname is not None else None,
        query=query if single else {**query, "host": pairs},
    )


def libpq_url(url: str) -> str:
    """The libpq connection string (for ``psycopg.connect``) of any accepted form of a
    database URL: as SQLAlchemy's psycopg dialect connects, so both see the same
    hosts, in the same order, with the same parameters."""
    _, kwargs = _DIALECT.create_connect_args(  # type: ignore[no-untyped-call]
        parse_database_url(url))
    # Not the dialect's non-string arguments (its adapters map).
    return psycopg.conninfo.make_conninfo(
        "", **{str(k): v for k, v in kwargs.items() if isinstance(v, (str, int))})


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


def session_args(s: Settings, statement_timeout: float | None = None) -> dict[str, Any]:
    """psycopg's connection arguments for a session of the coordinator: the limits of
    ``s`` (and ``statement_timeout`` seconds per statement, for an answering service)
    and TCP keepalives."""
    options = (
        f"-c lock_timeout={int(s.lock_timeout * 1000)} "
        f"-c idle_in_transaction_session_timeout={int(s.idle_in_transaction_timeout * 1000)} "
        # Notice a vanished client while its query runs, not only when it next writes.
        "-c client_connection_check_interval=2000 "
        # The planner's guesses for the recursive walks pass the JIT thresholds, and
        # compiling cost more than it saved: 20-25 ms of a worker's 20 ms read of
        # 1,000 ids, 340 ms of a 600 ms read of a 20,000-node subtree.
        "-c jit=off"
    )
    if statement_timeout is not None:
        options += f" -c statement_timeout={max(1, int(statement_timeout * 1000))}"
    if s.custom_plans:
        options += " -c plan_cache_mode=force_custom_plan"
    return {
        "options": options,
        "connect_timeout": max(1, int(s.connect_timeout)),
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "application_name": "pathkeeper",
    }


def connect_engine(database_url: str, s: Settings, statement_timeout: float | None = None
                   ) -> Engine:
    """The coordinator's pooled engine, with the session limits of ``s`` (and
    ``statement_timeout``: see ``session_args``)."""
    return create_engine(
        parse_database_url(database_url),
        pool_size=s.pool_size,
        max_overflow=s.max_overflow,
        pool_timeout=s.pool_timeout,
        # No pre-ping: it was a round trip on every checkout (one of ten for a
        # rename). ``Coordinator.run`` re-runs a transaction whose connection turns out
        # dead before COMMIT instead, which is as transparent after a server restart.
        pool_pre_ping=False,
        connect_args=session_args(s, statement_timeout),
    )


def closed_by_server(fd: int) -> bool:
    """Whether the idle connection on socket ``fd`` has something to read: the server's
    goodbye (a FATAL on shutdown or termination) or the end of the stream. One ``poll``
    with no wait, instead of a pre-ping's round trip; for a caller whose first statement
    commits, so cannot re-run it once a send failed. (``poll``, not ``select``: a
    process with many connections has sockets past ``select``'s limit of 1,024.)"""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


def streamed(
    conn: Connection, statement: TextClause, params: Mapping[str, Any], chunk: int
) -> Generator[Row[Any], None, None]:
    """The rows of ``statement`` from a server-side cursor, ``chunk`` at a time, so
    memory stays bounded whatever their number. Finishing or closing the generator
    closes the cursor: a caller that may stop early closes it (``contextlib.closing``)
    while ``conn`` is open, since left to the garbage collector the cursor may be
    collected first, still open."""
    # Per statement: Connection.execution_options() would change the connection.
    rows = conn.execute(
        statement, dict(params), execution_options={"stream_results": True, "yield_per": chunk}
    )
    cursor = rows.cursor
    try:
        yield from rows
    finally:
        try:
            rows.close()
        finally:
            # A connection that died under the cursor (a killed server, a failover) fails
            # its CLOSE before psycopg marks it closed (SQLAlchemy logs that and goes on),
            # and the garbage collector reports it open later. Nothing is open on a dead
            # connection: mark it closed.
            if isinstance(cursor, psycopg.ServerCursor) and not cursor.closed:
                psycopg.Cursor.close(cursor)


_DIALECT = PGDialect_psycopg()  # type: ignore[no-untyped-call]


def driver_sql(sql: str | TextClause, binary: Iterable[str] = ()) -> str:
    """A ``text()`` statement as psycopg takes it (``%(name)s`` placeholders, ``%``
    escaped): what SQLAlchemy sends for it, compiled once instead of on every call.
    Parameters named in ``binary`` are sent in binary form (arrays of strings: the text
    form escapes every element, with a regular expression, in Python)."""
    clause = text(sql) if isinstance(sql, str) else sql
    compiled = str(clause.compile(dialect=_DIALECT))
    for name in binary:
        placeholder = f"%({name})s"
        if placeholder not in compiled:
            raise ValueError(f"no parameter {name!r} in the statement")
        compiled = compiled.replace(placeholder, f"%({name})b")
    return compiled


class Driver:
    """psycopg itself, under a SQLAlchemy ``Connection`` and in its transaction, for the
    statements every write runs: SQLAlchemy's work per statement (compiling ``text()``,
    result metadata) was most of a rename's client CPU, and only psycopg can pipeline
    (send several statements, then wait once: one round trip for all of them).

    Statements are written for ``text()`` and compiled with ``driver_sql``. A driver
    error is raised exactly as SQLAlchemy raises it (``DBAPIError`` subclasses, and a
    dead connection is invalidated and flagged ``connection_invalidated``), so callers
    handle both paths alike. Rows are named tuples (``row.id``)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        raw = conn.connection.driver_connection
        assert isinstance(raw, psycopg.Connection)
        self.raw: psycopg.Connection[Any] = raw
        self._pipelined = False

    def send(self, sql: str, params: Mapping[str, Any]) -> psycopg.Cursor[Any]:
        """Execute ``sql`` (compiled by ``driver_sql``); its rows are on the cursor. In a
        ``pipeline`` block the statement is only queued: read the cursor after the block."""
        cur = self.raw.cursor(row_factory=namedtuple_row)
        if self._pipelined:
            # psycopg may read an earlier statement's error while this one is queued: it
            # is raised by ``pipeline``, once the pipeline has ended. Handled here, the
            # connection's rollback would run inside the aborted pipeline and fail with
            # PipelineAborted, hiding the error (an unmigrated database's, for one).
            cur.execute(sql, params)
            return cur
        with self.errors(sql, params):
            cur.execute(sql, params)
        return cur

    def send_and_commit(self, sql: str, params: Mapping[str, Any]) -> psycopg.Cursor[Any]:
        """Send ``sql`` and COMMIT right behind it; wait for both answers once (one round
        trip) and return ``sql``'s cursor. For a transaction with nothing left to do. If
        the connection fails, whether the COMMIT applied is unknown: the caller must not
        run it again."""
        # The server skips what follows an error in a pipeline (the transaction stays
        # open to roll back): COMMIT runs only if the statement succeeded.
        with self.pipeline():
            cur = self.send(sql, params)
            self.send("COMMIT", {})
        return cur

    def all(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        cur = self.send(sql, params)
        with self.errors(sql, params):
            return cur.fetchall()

    def one_or_none(self, sql: str, params: Mapping[str, Any]) -> Any:
        rows = self.all(sql, params)
        if len(rows) > 1:
            raise RuntimeError("more than one row where at most one was expected")
        return rows[0] if rows else None

    def one(self, sql: str, params: Mapping[str, Any]) -> Any:
        rows = self.all(sql, params)
        if len(rows) != 1:
            raise RuntimeError(f"expected one row, got {len(rows)}")
        return rows[0]

    @contextmanager
    def pipeline(self) -> Iterator[None]:
        """Queue the statements ``send`` inside; send them at once and wait for all their
        results on exit (the server still runs them one after another, in order, and
        skips the rest after an error, which is raised here)."""
        with self.errors(None, None), self.raw.pipeline():
            self._pipelined = True
            try:
                yield
            finally:
                self._pipelined = False

    @contextmanager
    def errors(self, sql: str | None, params: Mapping[str, Any] | None) -> Iterator[None]:
        """Raise a driver error as SQLAlchemy would have raised it for this statement."""
        try:
            yield
        except psycopg.Error as exc:
            # SQLAlchemy's own handling: wraps it, detects a disconnect, invalidates the
            # connection and the pool's record of it.
            self.conn._handle_dbapi_exception(exc, sql, dict(params or {}), None, None)


#: Where a pooled connection keeps its cursor for lone statements (``LoneConnection``).
_KEPT_CURSOR = "pathkeeper.kept_cursor"


class LoneConnection:
    """A pooled connection for statements that are each a transaction of their own
    (``coordinator.single_statement``): psycopg itself, without SQLAlchemy's
    ``Connection`` around it. With 8 writer processes on 2 shared cores, making and
    closing that facade for each statement cost 10-20 % of a lone rename's client CPU
    (bench/README.md).
    As with ``Driver``, a driver error is raised as SQLAlchemy raises it, and a
    connection found closed or broken is invalidated, so the pool opens another."""

    def __init__(self, pooled: PoolProxiedConnection) -> None:
        self._pooled = pooled
        raw = pooled.driver_connection
        assert isinstance(raw, psycopg.Connection)
        self.raw: psycopg.Connection[Any] = raw

    def closed_by_server(self) -> bool:
        """``closed_by_server`` of this connection (idle, outside any transaction)."""
        return closed_by_server(self.raw.fileno())

    def invalidate(self) -> None:
        """Close it and make the pool open a new one in its place."""
        self._pooled.invalidate()

    def fetch_one(self, sql: str, params: Mapping[str, Any], *, large: bool = False) -> Any:
        """Run ``sql`` (compiled by ``driver_sql``) as a transaction of its own and
        return its one row (or None): sent in autocommit, so the server commits it as it
        ends, in the one round trip. Like a COMMIT, it cannot be re-run after a failed
        send: whether it applied is unknown.

        It runs on the cursor kept with the driver connection: a new cursor's adapters,
        and its loaders made again for each statement, were 6-18 % of a lone rename's
        client CPU (bench/README.md). A cursor holds its last answer until its
        next statement, so an answer that may be ``large`` (a file's content) gets a
        cursor of its own, closed at once."""
        raw = self.raw
        raw.autocommit = True
        try:
            if large:
                with raw.cursor(row_factory=namedtuple_row) as cur:
                    cur.execute(sql, params)
                    return cur.fetchone()
            cur = self._kept_cursor()
            cur.execute(sql, params)
            return cur.fetchone()
        except psycopg.Error as exc:
            lost = raw.closed or raw.broken  # what SQLAlchemy's dialect calls a disconnect
            if lost:
                self.invalidate()
            raise wrapped(exc, sql, params, invalidated=lost) from exc
        finally:
            if not raw.closed:
                raw.autocommit = False

    def _kept_cursor(self) -> psycopg.Cursor[Any]:
        # The pool's ``info`` lives as long as the driver connection (cleared when it is
        # invalidated); psycopg keeps a cursor's loaders while it runs the same query.
        info = self._pooled.info
        cur: psycopg.Cursor[Any] | None = info.get(_KEPT_CURSOR)
        if cur is None:
            cur = info[_KEPT_CURSOR] = self.raw.cursor(row_factory=namedtuple_row)
        return cur


@contextmanager
def lone_connection(engine: Engine) -> Iterator[LoneConnection]:
    """A connection of ``engine``'s pool for lone statements, given back on exit. A
    failure to connect is raised as ``engine.connect()`` raises it."""
    try:
        pooled = engine.raw_connection()
    except psycopg.Error as exc:
        raise wrapped(exc, None, None, invalidated=False) from exc
    try:
        yield LoneConnection(pooled)
    finally:
        pooled.close()


def wrapped(exc: psycopg.Error, sql: str | None, params: Mapping[str, Any] | None, *,
            invalidated: bool) -> DBAPIError:
    """A driver error raised outside SQLAlchemy's ``Connection`` (an asyncio
    connection's, a ``LoneConnection``'s; ``sql`` None: while connecting) as SQLAlchemy
    raises it (``IntegrityError``, ``OperationalError``... with ``connection_invalidated``),
    so ``translate`` and the callers' checks read both alike."""
    error = DBAPIError.instance(sql, None if params is None else dict(params), exc,
                                psycopg.Error, connection_invalidated=invalidated)
    assert isinstance(error, DBAPIError)
    return error


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


@contextmanager
def translated() -> Iterator[None]:
    """Raise a driver error of the block as its typed error (``translate``): for the calls
    that hand no error back to a retry loop, so that none leaves the coordinator raw."""
    try:
        yield
    except DBAPIError as exc:
        raise translate(exc) from exc


_SERVER_ERRORS: dict[str, type[CoordinatorError]] = {
    SERVER_NOT_FOUND: NotFound,
    SERVER_NOT_A_DIRECTORY: NotADirectory,
    SERVER_INVALID_MOVE: InvalidMove,
    SERVER_CONFLICT: Conflict,
    SERVER_NOT_EMPTY: DirectoryNotEmpty,
    SERVER_IS_A_DIRECTORY: IsADirectory,
    SERVER_INVALID_ARGUMENT: InvalidArgument,
    SERVER_TOO_LARGE: TooLarge,
    SERVER_NAMESPACE_FROZEN: NamespaceFrozen,
    SERVER_NAMESPACE_MOVED: NamespaceMoved,
}


def sent_and_lost(exc: DBAPIError) -> bool:
    """Whether ``exc``, raised once a change was sent to be committed, means the
    connection died before its answer came (so the change may or may not have applied)."""
    return bool(exc.connection_invalidated)


def outcome_unknown(exc: DBAPIError) -> OutcomeUnknown:
    """The error for a change whose connection died after it was sent to commit."""
    return OutcomeUnknown(
        "the connection to the database was lost after the change was sent: it may or "
        "may not have applied (retry with the same idempotency key, or read it back); "
        f"{exc.orig}".strip())


def _typed(exc: DBAPIError, state: str, detail: str) -> CoordinatorError:
    if state in _SERVER_ERRORS:
        return _SERVER_ERRORS[state](detail)
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
    # The function's name is in the message whatever the server's language.
    if state in SCHEMA_MISSING or (state == UNDEFINED_FUNCTION and SERVER_FUNCTIONS in detail):
        return NotMigrated(f"the database is not migrated ({detail}): {UPGRADE_HINT}")
    if state == QUERY_CANCELED:
        return Unavailable(f"statement timed out: {detail}")
    # A failed connection attempt has no SQLSTATE (the server never answered).
    no_answer = isinstance(exc, OperationalError) and not state
    if exc.connection_invalidated or no_answer or state.startswith(("08", "57P")):
        return Unavailable(f"database unavailable: {detail}")
    return CoordinatorError(f"database error {state}: {detail}")
