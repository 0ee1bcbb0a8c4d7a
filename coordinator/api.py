"""``Coordinator``: the Python API that services and the rest of Pathkeeper call.

One connection pool; every call is one transaction (``TreeTx``), retried as a
whole on deadlocks, serialization failures and the races ``TreeTx`` reports as
``Retry``. Database errors are translated here into ``coordinator.errors``.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError

from . import paths
from .errors import (
    AlreadyExists,
    Conflict,
    CoordinatorError,
    DirectoryNotEmpty,
    InvalidConfiguration,
    InvalidName,
    NotFound,
    NotMigrated,
    TooLarge,
    Unavailable,
)
from .eventlog import REPORT_AFTER, Event, EventAppender, Partition, Writer, read_events
from .events import NamespaceCreated, NamespaceDropped
from .importer import Importer, ImportResult, ProgressFn
from .indexing import DEFAULT_CONSUMER, wait_indexed
from .notifier import Notifier
from .tree import MutationResult, Node, Retry, TreeTx, check_namespace_exists

T = TypeVar("T")

RETRYABLE_SQLSTATES = {"40001", "40P01"}  # serialization failure, deadlock detected
#: Undefined table or column: our schema is missing or older than the code. (Not an
#: undefined function: that is more likely a PostgreSQL older than the code supports.)
SCHEMA_SQLSTATES = {"42P01", "42703"}
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


@dataclass(frozen=True)
class Settings:
    lock_timeout: float = 3.0
    #: A session left idle inside a transaction (a hung or dead client) is ended by
    #: the server after this long, releasing its locks.
    idle_in_transaction_timeout: float = 30.0
    max_retries: int = 8
    max_depth: int = paths.MAX_DEPTH
    max_group_ops: int = 1000
    notify: bool = True
    pool_size: int = 10
    max_overflow: int = 20
    pool_timeout: float = 10.0
    connect_timeout: float = 5.0


def translate(exc: DBAPIError) -> CoordinatorError:
    """Map a driver error to a typed coordinator error."""
    state = getattr(exc.orig, "sqlstate", None) or ""
    diag = getattr(exc.orig, "diag", None)
    detail = str(getattr(diag, "message_primary", None) or exc.orig)
    if state == "55P03":
        return Conflict(f"lock wait timed out: {detail}")
    if state == "23505":
        return AlreadyExists(detail)
    if state == "23503":
        return NotFound(detail)
    if state in ("23514", "22021", "22P05", "22P02"):
        return InvalidName(detail)
    if state in RETRYABLE_SQLSTATES:
        return Conflict(f"gave up after repeated conflicts: {detail}")
    if state in SCHEMA_SQLSTATES:
        return NotMigrated(f"the database is not migrated ({detail}): {UPGRADE_HINT}")
    if state == "57014":
        return Unavailable(f"statement timed out: {detail}")
    # A failed connection attempt has no SQLSTATE (the server never answered).
    no_answer = isinstance(exc, OperationalError) and not state
    if exc.connection_invalidated or no_answer or state.startswith(("08", "57P")):
        return Unavailable(f"database unavailable: {detail}")
    return CoordinatorError(f"database error {state}: {detail}")


class Disconnected(Exception):
    """The connection died before COMMIT: nothing applied, the transaction may run again."""

    def __init__(self, error: DBAPIError) -> None:
        super().__init__(str(error))
        self.error = error


class Coordinator:
    """Transactional namespace trees in PostgreSQL. Thread-safe: share one per process."""

    def __init__(self, engine: Engine, settings: Settings | None = None) -> None:
        self.engine = engine
        self.settings = settings or Settings()
        self.notifier = Notifier(engine)

    @classmethod
    def connect(cls, database_url: str, **settings: Any) -> Coordinator:
        s = Settings(**settings)
        options = (
            f"-c lock_timeout={int(s.lock_timeout * 1000)} "
            f"-c idle_in_transaction_session_timeout={int(s.idle_in_transaction_timeout * 1000)} "
            # Notice a vanished client while its query runs, not only when it next writes.
            "-c client_connection_check_interval=2000"
        )
        engine = create_engine(
            parse_database_url(database_url),
            pool_size=s.pool_size,
            max_overflow=s.max_overflow,
            pool_timeout=s.pool_timeout,
            # No pre-ping: it was a round trip on every checkout (one of ten for a
            # rename). ``run`` re-runs a transaction whose connection turns out dead
            # before COMMIT instead, which is as transparent after a server restart.
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
        return cls(engine, s)

    def close(self) -> None:
        self.notifier.close()
        self.engine.dispose()

    def __enter__(self) -> Coordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------- transactions

    def _sleep_backoff(self, attempt: int) -> None:
        time.sleep(min(0.2, 0.002 * 2**attempt) * (0.5 + random.random()))

    def run(self, namespace: str, fn: Callable[[TreeTx], T]) -> T:
        """Run ``fn`` in one transaction on ``namespace``, re-running it on transient races.

        ``fn`` may run more than once: it must not have effects outside the transaction.
        """
        ns = paths.validate_namespace(namespace)
        for attempt in range(self.settings.max_retries + 1):
            try:
                with self._transaction(ns) as tx:
                    return fn(tx)
            except Retry:
                pass
            except Disconnected as exc:
                if attempt == self.settings.max_retries:
                    raise translate(exc.error) from exc.error
            except DBAPIError as exc:
                state = getattr(exc.orig, "sqlstate", None)
                if state not in RETRYABLE_SQLSTATES or attempt == self.settings.max_retries:
                    raise translate(exc) from exc
            self._sleep_backoff(attempt)
        raise Conflict("gave up after repeated conflicting changes")

    @contextmanager
    def _transaction(self, ns: str) -> Iterator[TreeTx]:
        try:
            with self.engine.begin() as conn:
                # The wake-up is sent after COMMIT by the notifier, not in the transaction
                # (see coordinator/notifier.py).
                events = EventAppender(conn, notify=False)
                try:
                    # A missing namespace shows up as NotFound when the first path is
                    # resolved.
                    yield TreeTx(conn, ns, events, self.settings.max_depth)
                    events.flush()  # the last statement before COMMIT (see EventAppender)
                except DBAPIError as exc:
                    if exc.connection_invalidated:
                        # Before COMMIT, so nothing applied: safe to run again on a new
                        # connection (a server restart left the pooled one dead).
                        raise Disconnected(exc) from exc
                    raise
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) in RETRYABLE_SQLSTATES:
                raise
            raise translate(exc) from exc
        if events.base is not None and self.settings.notify:
            self.notifier.poke(ns)

    @contextmanager
    def transaction(self, namespace: str) -> Iterator[GroupTx]:
        """Several operations on one namespace, atomically: commit on normal exit,
        roll back on an exception. A deadlock inside surfaces as ``Conflict``
        (the block cannot be re-run for you; use ``apply`` for automatic retries)."""
        ns = paths.validate_namespace(namespace)
        try:
            with self._transaction(ns) as tx:
                group = GroupTx(tx, self.settings.max_group_ops)
                yield group
                # The block may have caught a step's error and carried on: if that step
                # failed in the database, nothing can commit, so say so instead of letting
                # the COMMIT silently roll back.
                group.check_alive()
        except Retry as exc:
            raise Conflict("the group raced with another change; run it again") from exc
        except Disconnected as exc:
            raise translate(exc.error) from exc.error
        except DBAPIError as exc:
            raise translate(exc) from exc

    def apply(self, namespace: str, ops: Sequence[Operation]) -> list[MutationResult]:
        """Apply a list of operations atomically, retrying the whole list on deadlocks."""
        if len(ops) > self.settings.max_group_ops:
            raise TooLarge(f"at most {self.settings.max_group_ops} operations per group")

        def body(tx: TreeTx) -> list[MutationResult]:
            group = GroupTx(tx, self.settings.max_group_ops)
            return [op.apply(group) for op in ops]

        return self.run(namespace, body)

    # ---------------------------------------------------------- namespaces

    def create_namespace(self, name: str) -> MutationResult:
        ns = paths.validate_namespace(name)
        root = uuid.uuid4()
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    text("INSERT INTO namespaces (name, root_id) VALUES (:ns, :root)"),
                    {"ns": ns, "root": root},
                )
                conn.execute(
                    text(
                        "INSERT INTO nodes (namespace, id, parent_id, name, kind) "
                        "VALUES (:ns, :root, NULL, '', 'dir')"
                    ),
                    {"ns": ns, "root": root},
                )
                appender = EventAppender(conn, notify=False)
                seq = appender.append(ns, NamespaceCreated(root_id=str(root)))
                appender.flush()
                tx = TreeTx(conn, ns, appender)
                result = MutationResult(tx.stat("/"), seq)
            if self.settings.notify:
                self.notifier.poke(ns)
            return result
        except DBAPIError as exc:
            err = translate(exc)
            if isinstance(err, AlreadyExists):
                raise AlreadyExists(f"namespace {ns!r} already exists") from exc
            raise err from exc

    def drop_namespace(self, name: str, force: bool = False) -> MutationResult:
        ns = paths.validate_namespace(name)

        def body(tx: TreeTx) -> MutationResult:
            conn = tx.conn
            conn.execute(text("SELECT 1 FROM namespaces WHERE name = :ns FOR UPDATE"), {"ns": ns})
            root = tx.lock("/")[0]
            node = tx.stat("/")
            has_child = conn.execute(
                text(
                    "SELECT EXISTS (SELECT 1 FROM nodes "
                    "WHERE namespace = :ns AND parent_id = :r)"
                ),
                {"ns": ns, "r": root.id},
            ).scalar_one()
            if has_child and not force:
                raise DirectoryNotEmpty(f"namespace {ns!r} is not empty (use force=True)")
            count = conn.execute(
                text("DELETE FROM nodes WHERE namespace = :ns"), {"ns": ns}
            ).rowcount
            conn.execute(text("DELETE FROM namespaces WHERE name = :ns"), {"ns": ns})
            seq = tx.events.append(ns, NamespaceDropped(root_id=str(root.id), count=count))
            return MutationResult(node, seq)

        return self.run(ns, body)

    def namespaces(self) -> list[str]:
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(text("SELECT name FROM namespaces ORDER BY name"))
                return list(rows.scalars())
        except DBAPIError as exc:
            raise translate(exc) from exc

    # ------------------------------------------------------------ mutations

    def mkdir(self, ns: str, path: str, parents: bool = False) -> MutationResult:
        return self.run(ns, lambda tx: tx.mkdir(path, parents))

    def create_file(
        self, ns: str, path: str, content: str = "", metadata: dict[str, Any] | None = None
    ) -> MutationResult:
        return self.run(ns, lambda tx: tx.create_file(path, content, metadata))

    def write_file(
        self,
        ns: str,
        ref: str,
        content: str,
        metadata: dict[str, Any] | None = None,
        if_version: int | None = None,
    ) -> MutationResult:
        return self.run(ns, lambda tx: tx.write_file(ref, content, metadata, if_version))

    def move(
        self, ns: str, src: str, dst_path: str, if_version: int | None = None
    ) -> MutationResult:
        return self.run(ns, lambda tx: tx.move(src, dst_path, if_version))

    def rename(
        self, ns: str, ref: str, new_name: str, if_version: int | None = None
    ) -> MutationResult:
        return self.run(ns, lambda tx: tx.rename(ref, new_name, if_version))

    def delete(
        self, ns: str, ref: str, recursive: bool = False, if_version: int | None = None
    ) -> MutationResult:
        return self.run(ns, lambda tx: tx.delete(ref, recursive, if_version))

    # -------------------------------------------------------------- import

    def import_nodes(
        self,
        namespace: str,
        source: Iterable[bytes | str],
        *,
        progress: ProgressFn | None = None,
    ) -> ImportResult:
        """Import a tree from JSON Lines (an iterable of lines: an open file, a list of
        strings, ``iter_lines`` of a stream of chunks) in one transaction; missing
        parent directories are created. All or nothing: bad lines raise a typed error
        listing them (``exc.lines``) and nothing is written. See ``coordinator.importer``.

        Not re-run on a deadlock (the input is read once): that is ``Conflict``."""
        ns = paths.validate_namespace(namespace)
        try:
            with self.engine.begin() as conn:
                importer = Importer(
                    conn, ns, max_depth=self.settings.max_depth, notify=False,
                    progress=progress,
                )
                result = importer.run(source)
        except DBAPIError as exc:
            raise translate(exc) from exc
        if result.created and self.settings.notify:
            self.notifier.poke(ns)
        return result

    # ---------------------------------------------------------------- reads

    def stat(self, ns: str, path: str) -> Node:
        return self.run(ns, lambda tx: tx.stat(path))

    def get(self, ns: str, node_id: str) -> Node:
        return self.run(ns, lambda tx: tx.stat(node_id))

    def listdir(
        self, ns: str, path: str = "/", after: str | None = None, limit: int | None = None
    ) -> list[Node]:
        return self.run(ns, lambda tx: tx.listdir(path, after, limit))

    def walk(self, ns: str, path: str = "/", batch: int = 1000) -> Iterator[Node]:
        """Every node of the subtree (root included) with its full path, streamed in path
        order from one consistent snapshot; holds one pooled connection while iterating."""
        name = paths.validate_namespace(ns)
        try:
            with self.engine.connect() as conn, conn.begin():
                conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
                check_namespace_exists(conn, name)
                tx = TreeTx(conn, name, EventAppender(conn, False), self.settings.max_depth)
                yield from tx.walk(path, batch)
        except DBAPIError as exc:
            raise translate(exc) from exc

    # ------------------------------------------------------------ event log

    def read_events(
        self,
        after: int | None = None,
        limit: int = 1000,
        *,
        namespaces: Sequence[str] | None = None,
        partition: Partition | None = None,
        until: int | None = None,
        wait: float = 5.0,
        on_slow: Callable[[list[Writer]], None] | None = None,
        report_after: float = REPORT_AFTER,
    ) -> tuple[list[Event], int]:
        """Events safe to consume after cursor ``after`` (None: from the start), in commit-safe
        position order, and the cursor to pass back. Waits up to ``wait`` seconds for
        writers in flight; ``on_slow(writers)`` is called once if that lasts
        ``report_after`` seconds. See ``coordinator.eventlog``."""
        try:
            return read_events(
                self.engine, after, limit, namespaces=namespaces, partition=partition,
                until=until, wait=wait, on_slow=on_slow, report_after=report_after,
            )
        except DBAPIError as exc:
            raise translate(exc) from exc

    def wait_indexed(
        self, seq: int, timeout: float = 10.0, consumer: str = DEFAULT_CONSUMER
    ) -> bool:
        """True once the indexer ``consumer`` has applied every event up to position
        ``seq`` (e.g. a ``MutationResult.seq``) to Elasticsearch; False on timeout.
        See ``coordinator.indexing``."""
        try:
            return wait_indexed(self.engine, seq, timeout, consumer)
        except DBAPIError as exc:
            raise translate(exc) from exc


class GroupTx:
    """The mutation and read methods of ``Coordinator`` inside one group transaction."""

    def __init__(self, tx: TreeTx, max_ops: int) -> None:
        self._tx = tx
        self._max_ops = max_ops
        self._ops = 0
        self._failure: CoordinatorError | None = None
        self.results: list[MutationResult] = []

    def check_alive(self) -> None:
        """Raise if an earlier step failed: a group is all or nothing, so once a step
        failed (whether or not the block caught the error) nothing more runs and the
        group cannot commit."""
        if self._failure is not None:
            cause = self._failure
            raise type(cause)(f"the group was rolled back: a step failed ({cause})") from cause

    def _step(self, op: Callable[[], T], mutation: bool = True) -> T:
        """Run one step. A database error is translated (deadlocks stay raw, so that
        ``Coordinator.run`` re-runs the group) and remembered for ``check_alive``, as is
        any failed mutation; a read's answer (NotFound from ``stat``) changes nothing."""
        self.check_alive()
        try:
            return op()
        except DBAPIError as exc:
            err = translate(exc)
            self._failure = err
            if getattr(exc.orig, "sqlstate", None) in RETRYABLE_SQLSTATES:
                raise
            raise err from exc
        except CoordinatorError as exc:
            if mutation:
                self._failure = exc
            raise

    @property
    def namespace(self) -> str:
        return self._tx.ns

    def _count(self, result: MutationResult) -> MutationResult:
        self._ops += 1
        if self._ops > self._max_ops:
            raise TooLarge(f"at most {self._max_ops} operations per group")
        self.results.append(result)
        return result

    def mkdir(self, path: str, parents: bool = False) -> MutationResult:
        return self._count(self._step(lambda: self._tx.mkdir(path, parents)))

    def create_file(
        self, path: str, content: str = "", metadata: dict[str, Any] | None = None
    ) -> MutationResult:
        return self._count(self._step(lambda: self._tx.create_file(path, content, metadata)))

    def write_file(
        self, ref: str, content: str, metadata: dict[str, Any] | None = None,
        if_version: int | None = None,
    ) -> MutationResult:
        return self._count(
            self._step(lambda: self._tx.write_file(ref, content, metadata, if_version))
        )

    def move(self, src: str, dst_path: str, if_version: int | None = None) -> MutationResult:
        return self._count(self._step(lambda: self._tx.move(src, dst_path, if_version)))

    def rename(self, ref: str, new_name: str, if_version: int | None = None) -> MutationResult:
        return self._count(self._step(lambda: self._tx.rename(ref, new_name, if_version)))

    def delete(
        self, ref: str, recursive: bool = False, if_version: int | None = None
    ) -> MutationResult:
        return self._count(self._step(lambda: self._tx.delete(ref, recursive, if_version)))

    def stat(self, path: str) -> Node:
        return self._step(lambda: self._tx.stat(path), mutation=False)

    def get(self, node_id: str) -> Node:
        return self._step(lambda: self._tx.stat(node_id), mutation=False)

    def listdir(
        self, path: str = "/", after: str | None = None, limit: int | None = None
    ) -> list[Node]:
        return self._step(lambda: self._tx.listdir(path, after, limit), mutation=False)


@dataclass(frozen=True)
class Operation:
    """One step of ``Coordinator.apply``: ``op`` is a ``GroupTx`` method name."""

    op: str
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    MUTATIONS = ("mkdir", "create_file", "write_file", "move", "rename", "delete")

    @classmethod
    def of(cls, op: str, *args: Any, **kwargs: Any) -> Operation:
        if op not in cls.MUTATIONS:
            raise ValueError(f"unknown operation {op!r}")
        return cls(op, args, tuple(sorted(kwargs.items())))

    def apply(self, group: GroupTx) -> MutationResult:
        result: MutationResult = getattr(group, self.op)(*self.args, **dict(self.kwargs))
        return result
