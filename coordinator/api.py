"""``Coordinator``: the Python API that services and the rest of Pathkeeper call.

Every call is one transaction (a ``UnitOfWork``) on one namespace, retried as a whole on
deadlocks, serialization failures and the races ``TreeTx`` reports as ``Retry``. Driver
errors become ``coordinator.errors`` through ``coordinator.db``.

Each call runs on its namespace's database server, which a ``ShardMap`` names
(``coordinator.shard_map``): one server and its pool (``SingleShard``: no directory, no
configuration), or several named by a directory database
(``coordinator.shard_directory.DirectoryMap``). A server that refuses the namespace
(``NamespaceMoved``: a stale map after a move; ``NamespaceFrozen``: a move in flight)
sends the call once more to the server the map names after a re-read
(``shard_map.rerouted``).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from . import paths, single_statement
from .commands import (
    Command,
    GroupCommands,
    NamespaceCommands,
)
from .db import (
    QUERY_CANCELED,
    connect_engine,
    is_retryable,
    lone_connection,
    outcome_unknown,
    sent_and_lost,
    sqlstate,
    translate,
)
from .errors import (
    AlreadyExists,
    Conflict,
    CoordinatorError,
    DirectoryNotEmpty,
    InvalidArgument,
    InvalidConfiguration,
    NamespaceFrozen,
    NamespaceMoved,
    NotFound,
    TooLarge,
)
from .event_reader import REPORT_AFTER, Partition, WriterInFlight, read_events
from .events import NamespaceCreated, NamespaceDropped
from .importer import (
    Importer,
    ImportResult,
    ProgressFn,
    analyze_if_grown,
    import_timed_out,
)
from .indexing import DEFAULT_CONSUMER, wait_indexed
from .notifier import Notifier
from .results import Event, MutationResult, Node, Start
from .retries import Disconnected, Retry, backoff_seconds, check_retry
from .server_calls import StatQuery
from .settings import Settings
from .shard_map import Shard, ShardMap, SingleShard, rerouted
from .tree import TreeTx, check_namespace_exists
from .unit_of_work import UnitOfWork

T = TypeVar("T")


class Coordinator(NamespaceCommands):
    """Transactional namespace trees in PostgreSQL. Thread-safe: share one per process.

    The typed methods for each command (``mkdir``, ``rename``...) come from
    ``NamespaceCommands``; each builds its command and calls ``execute``."""

    def __init__(self, engine: Engine | None = None, settings: Settings | None = None, *,
                 shard_map: ShardMap | None = None) -> None:
        """On one server's ``engine`` (closed with the coordinator), or on the servers of
        ``shard_map`` (closed with it)."""
        self.settings = settings or Settings()
        if shard_map is None:
            if engine is None:
                raise InvalidArgument("a Coordinator needs an engine or a shard map")
            shard_map = SingleShard(engine.url.render_as_string(hide_password=False),
                                    engine=engine, settings=self.settings)
        elif engine is not None:
            raise InvalidArgument("a Coordinator takes an engine or a shard map, not both")
        self.shard_map = shard_map
        self._notifiers: dict[str, Notifier] = {}
        self._notifiers_lock = threading.Lock()

    @classmethod
    def connect(cls, database_url: str | None = None, *, directory_url: str | None = None,
                statement_timeout: float | None = None, **settings: Any) -> Coordinator:
        """A coordinator with a pool of its own on ``database_url``, or with a pool per
        server on the servers a directory database names (``directory_url``);
        ``settings``: ``Settings``' fields. ``statement_timeout`` (seconds) cancels any
        statement that runs longer: for an answering service, which bounds its requests
        (the worker and CLI do not)."""
        s = Settings(**settings)
        if directory_url is not None:
            from .shard_directory import DirectoryMap

            return cls(settings=s, shard_map=DirectoryMap(
                directory_url, s, statement_timeout=statement_timeout))
        if database_url is None:
            raise InvalidConfiguration("a database URL (or a directory's) is needed")
        return cls(connect_engine(database_url, s, statement_timeout), s)

    def close(self) -> None:
        with self._notifiers_lock:
            notifiers, self._notifiers = list(self._notifiers.values()), {}
        for notifier in notifiers:
            notifier.close()
        self.shard_map.close()

    @property
    def engine(self) -> Engine:
        """The pool of the one database server, for the code that works on a server as a
        whole (the indexer, its status, the idempotency purge); with a directory of
        several servers, that code takes each shard's (``shard_engines``), and this is
        ``InvalidConfiguration``."""
        shards = self.shard_map.shards()
        if len(shards) != 1:
            raise InvalidConfiguration(
                f"this works on one database server, and the directory names {len(shards)} "
                f"({', '.join(s.name for s in shards)}): run it per shard")
        return self.shard_map.engine(shards[0])

    def shard_engines(self) -> list[tuple[Shard, Engine]]:
        """Every shard with its pool, by name."""
        return [(shard, self.shard_map.engine(shard)) for shard in self.shard_map.shards()]

    @property
    def keys_engine(self) -> Engine:
        """The database of the HTTP API's keys (``ShardMap.keys_engine``)."""
        return self.shard_map.keys_engine()

    def _engine(self, shard: Shard) -> Engine:
        return self.shard_map.engine(shard)

    def _routed(self, ns: str, body: Callable[[Shard], T], shard: Shard | None = None) -> T:
        """``body`` on the shard of ``ns`` (or on ``shard``), and once more on the shard
        the map names after a re-read if that one refused the namespace."""
        tried = shard if shard is not None else self.shard_map.shard_of(ns)
        try:
            return body(tried)
        except (NamespaceMoved, NamespaceFrozen) as refusal:
            again = rerouted(self.shard_map, ns, tried, refusal)
        return body(again)

    def __enter__(self) -> Coordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------- transactions

    def run(self, namespace: str, fn: Callable[[UnitOfWork], T]) -> T:
        """Run ``fn`` in one unit of work on ``namespace``, re-running it on transient races.

        ``fn`` may run more than once: it must not have effects outside the transaction.
        """
        ns = paths.validate_namespace(namespace)
        return self._routed(ns, lambda shard: self._run_on(shard, ns, fn))

    def _run_on(self, shard: Shard, ns: str, fn: Callable[[UnitOfWork], T]) -> T:
        def once() -> T:
            with self._unit_of_work(ns, shard) as uow:
                return fn(uow)

        return self._retried(once)

    def _retried(self, once: Callable[[], T]) -> T:
        """``once()``, run again with backoff after a transient race (``retries``), up
        to ``max_retries`` times."""
        attempt = 0
        while True:
            try:
                return once()
            except (Retry, Disconnected, DBAPIError) as exc:
                check_retry(exc, attempt, self.settings.max_retries)
            time.sleep(backoff_seconds(attempt))
            attempt += 1

    @contextmanager
    def _unit_of_work(self, ns: str, shard: Shard) -> Iterator[UnitOfWork]:
        """Begin, yield, finish (events, then hooks) and commit; a deadlock stays a raw
        driver error (``run`` re-runs), anything else from the driver is translated."""
        uow: UnitOfWork | None = None
        committing = False  # the block is done: leaving ``begin`` sends COMMIT
        try:
            with self._engine(shard).begin() as conn:
                # A missing namespace shows up as NotFound when the first path is resolved.
                uow = UnitOfWork(conn, ns, self.settings.max_depth,
                                 self.settings.max_content_bytes)
                try:
                    yield uow
                    uow.finish()
                except DBAPIError as exc:
                    if exc.connection_invalidated and not uow.commit_sent:
                        # Before COMMIT, so nothing applied: safe to run again on a new
                        # connection (a server restart left the pooled one dead).
                        raise Disconnected(exc) from exc
                    raise
                committing = True
        except DBAPIError as exc:
            # Lost once COMMIT went out: whether it applied is unknown; never re-run.
            if is_retryable(exc):
                raise
            if (committing or (uow is not None and uow.commit_sent)) and sent_and_lost(exc):
                raise outcome_unknown(exc) from exc
            raise translate(exc) from exc
        if uow.wrote_events:
            self._wake(shard, ns)

    def wake_indexer(self, ns: str) -> None:
        """After a commit that wrote events in ``ns``."""
        if self.settings.notify:
            self._wake(self.shard_map.shard_of(ns), ns)

    def _wake(self, shard: Shard, ns: str) -> None:
        """Wake the indexer of ``shard`` (each server has its own log and listeners)."""
        if not self.settings.notify:
            return
        with self._notifiers_lock:
            notifier = self._notifiers.get(shard.name)
            if notifier is None:
                notifier = Notifier(self._engine(shard),
                                    min_interval=self.settings.notify_interval)
                self._notifiers[shard.name] = notifier
        notifier.poke(ns)

    def execute(self, namespace: str, command: Command) -> MutationResult:
        """Run one command in a transaction of its own, retried on transient races. A
        rename, a move, a delete, a write, a file's create and a plain mkdir are one
        statement in autocommit (``coordinator.single_statement``): the same rule, event and errors
        as ``command.apply`` in a unit of work."""
        ns = paths.validate_namespace(namespace)
        statement = single_statement.lone(ns, command, self.settings)
        if statement is not None:
            return self._routed(ns, lambda shard: self._alone(shard, statement))
        return self.run(ns, lambda uow: command.apply(uow.tree))

    def _alone(self, shard: Shard, statement: single_statement.Lone) -> MutationResult:
        """``statement`` (a command that is one), retried on transient races until
        sent, then the indexer woken."""

        def once() -> MutationResult:
            # Not re-run after a lost connection once sent: it commits as it ends.
            with lone_connection(self._engine(shard)) as conn:
                if conn.closed_by_server():  # e.g. the server restarted
                    conn.invalidate()
                    raise Retry()  # on a new connection
                try:
                    return single_statement.send(conn, statement)
                except DBAPIError as exc:
                    if sent_and_lost(exc):
                        raise outcome_unknown(exc) from exc
                    raise

        result = self._retried(once)
        if result.event is not None:
            self._wake(shard, statement.ns)
        return result

    @contextmanager
    def transaction(self, namespace: str) -> Iterator[GroupTx]:
        """Several operations on one namespace, atomically: commit on normal exit,
        roll back on an exception. A deadlock inside surfaces as ``Conflict``
        (the block cannot be re-run for you; use ``apply`` for automatic retries), and so
        does a refusal of the namespace by its server after a move (the map is read
        again first, so the block's next run goes to the new server)."""
        ns = paths.validate_namespace(namespace)
        shard = self.shard_map.shard_of(ns)
        try:
            with self._unit_of_work(ns, shard) as uow:
                group = GroupTx(uow.tree, self.settings.max_group_ops)
                yield group
                # The block may have caught a step's error and carried on: if that step
                # failed in the database, nothing can commit, so say so instead of letting
                # the COMMIT silently roll back.
                group.check_alive()
        except Retry as exc:
            raise Conflict("the group raced with another change; run it again") from exc
        except (NamespaceMoved, NamespaceFrozen) as refusal:
            rerouted(self.shard_map, ns, shard, refusal)  # raises unless it moved
            raise Conflict("the namespace moved to another database server while the "
                           "group ran; run it again") from refusal
        except Disconnected as exc:
            raise translate(exc.error) from exc.error
        except DBAPIError as exc:
            raise translate(exc) from exc

    def apply(self, namespace: str, commands: Sequence[Command]) -> list[MutationResult]:
        """Apply a list of commands atomically, retrying the whole list on deadlocks; a
        failing command's error carries its position in ``.index``."""
        if len(commands) > self.settings.max_group_ops:
            raise TooLarge(f"at most {self.settings.max_group_ops} operations per group")

        return self.run(
            namespace, lambda uow: apply_group(uow, commands, self.settings.max_group_ops)
        )

    # ---------------------------------------------------------- namespaces

    def create_namespace(self, name: str, shard: str | None = None) -> MutationResult:
        """Create the namespace ``name``, on the server named ``shard`` or on the one the
        placement rule picks (``Settings.placement``). The directory's row is written
        first (it claims the name), then the namespace on its server; a create that
        stopped between the two is finished by creating the same name again."""
        ns = paths.validate_namespace(name)
        try:
            placed = self.shard_map.place(ns, shard)
        except AlreadyExists:
            # Placed already: on its server it exists (the create below says so), or a
            # create stopped halfway, which this one finishes.
            placed = self.shard_map.shard_of(ns)
            if shard is not None and placed.name != shard:
                raise AlreadyExists(
                    f"namespace {ns!r} already exists (on shard {placed.name})") from None

        def body(uow: UnitOfWork) -> MutationResult:
            root = uuid.uuid4()
            uow.conn.execute(
                text("INSERT INTO namespaces (name, root_id) VALUES (:ns, :root)"),
                {"ns": ns, "root": root},
            )
            uow.conn.execute(
                text(
                    "INSERT INTO nodes (namespace, id, parent_id, name, kind) "
                    "VALUES (:ns, :root, NULL, '', 'dir')"
                ),
                {"ns": ns, "root": root},
            )
            seq = uow.events.append(ns, NamespaceCreated(root_id=str(root)))
            return MutationResult(uow.tree.stat("/"), seq)

        try:
            return self._routed(ns, lambda on: self._run_on(on, ns, body), placed)
        except AlreadyExists as exc:
            raise AlreadyExists(f"namespace {ns!r} already exists") from exc

    def drop_namespace(self, name: str, force: bool = False) -> MutationResult:
        ns = paths.validate_namespace(name)

        def body(uow: UnitOfWork) -> MutationResult:
            tx, conn = uow.tree, uow.conn
            conn.execute(text("SELECT 1 FROM namespaces WHERE name = :ns FOR UPDATE"), {"ns": ns})
            node = tx.lock("/")
            has_child = conn.execute(
                text(
                    "SELECT EXISTS (SELECT 1 FROM nodes "
                    "WHERE namespace = :ns AND parent_id = :r)"
                ),
                {"ns": ns, "r": uuid.UUID(node.id)},
            ).scalar_one()
            if has_child and not force:
                raise DirectoryNotEmpty(f"namespace {ns!r} is not empty (use force=True)")
            count = conn.execute(
                text("DELETE FROM nodes WHERE namespace = :ns"), {"ns": ns}
            ).rowcount
            conn.execute(text("DELETE FROM namespaces WHERE name = :ns"), {"ns": ns})
            seq = tx.events.append(ns, NamespaceDropped(root_id=node.id, count=count))
            return MutationResult(node, seq)

        tried = self.shard_map.shard_of(ns)
        try:
            result = self._routed(ns, lambda on: self._run_on(on, ns, body), tried)
        except NotFound:
            # Not on its server. If the directory, read again, still names that server, a
            # create or a drop stopped halfway and left the directory's row, which goes
            # now; if it names another, the map was stale and the row is the namespace's.
            self.shard_map.refresh(ns)
            if self._placed_on(ns) == tried:
                self.shard_map.forget(ns)
            raise
        self.shard_map.forget(ns)  # after the server's drop: never a namespace unnamed
        return result

    def _placed_on(self, ns: str) -> Shard | None:
        try:
            return self.shard_map.shard_of(ns)
        except NotFound:
            return None

    def namespaces(self) -> list[str]:
        """Every namespace, by name (with a directory: its placements)."""
        return self.shard_map.namespaces()

    # -------------------------------------------------------------- import

    def import_nodes(
        self,
        namespace: str,
        source: Iterable[bytes | str],
        *,
        progress: ProgressFn | None = None,
        timeout: float | None = None,
    ) -> ImportResult:
        """Import a tree from JSON Lines (an iterable of lines: a binary file, read in
        chunks, a list of strings, ``iter_lines`` of a stream of chunks) in one
        transaction; missing parent directories are created. All or nothing: bad lines
        raise a typed error listing them (``exc.lines``) and nothing is written; a line
        longer than ``Settings.max_import_line_bytes`` is ``TooLarge``. See
        ``coordinator.importer``.

        ``timeout`` (seconds) is the statement timeout of the import's statements, the COPY
        of its input among them (which lasts as long as the input takes to arrive),
        instead of the session's (``connect(statement_timeout=)``, meant for short
        requests); past it the import is ``Unavailable`` and nothing is written.

        Not re-run on a deadlock (the input is read once): that is ``Conflict``. For the
        same reason an import refused by a server the namespace has just left is run
        again on the new one only when ``source`` is a list (else ``NamespaceMoved``:
        the map is read again, send it again)."""
        ns = paths.validate_namespace(namespace)
        shard = self.shard_map.shard_of(ns)
        try:
            return self._import_on(shard, ns, source, progress, timeout)
        except (NamespaceMoved, NamespaceFrozen) as refusal:
            again = rerouted(self.shard_map, ns, shard, refusal)
            if not isinstance(source, list):
                raise
        return self._import_on(again, ns, source, progress, timeout)

    def _import_on(self, shard: Shard, ns: str, source: Iterable[bytes | str],
                   progress: ProgressFn | None, timeout: float | None) -> ImportResult:
        try:
            with self._engine(shard).begin() as conn:
                if timeout is not None:  # for this transaction only
                    conn.execute(text("SELECT set_config('statement_timeout', :ms, true)"),
                                 {"ms": f"{max(1, int(timeout * 1000))}ms"})
                # The wake-up is sent after COMMIT, as for every write.
                importer = Importer(
                    conn, ns, max_depth=self.settings.max_depth,
                    max_line_bytes=self.settings.max_import_line_bytes,
                    max_content_bytes=self.settings.max_content_bytes, progress=progress,
                )
                result = importer.run(source)
        except DBAPIError as exc:
            if sqlstate(exc) == QUERY_CANCELED:
                raise import_timed_out(timeout) from exc
            raise translate(exc) from exc
        if result.created:
            self._wake(shard, ns)
            with self._engine(shard).connect() as conn:
                analyze_if_grown(conn.execution_options(isolation_level="AUTOCOMMIT"),
                                 result.created)
        return result

    # ---------------------------------------------------------------- reads

    def stat(self, ns: str, path: str) -> Node:
        return self._stat_alone(ns, path)

    def get(self, ns: str, node_id: str) -> Node:
        return self._stat_alone(ns, node_id)

    def _stat_alone(self, namespace: str, ref: str) -> Node:
        """One statement in autocommit (``coordinator.single_statement``), as ``TreeTx.stat``
        runs it inside a transaction."""
        call = StatQuery.of(paths.validate_namespace(namespace), ref)
        return self._routed(call.ns, lambda shard: self._stat_on(shard, call))

    def _stat_on(self, shard: Shard, call: StatQuery) -> Node:
        def once() -> Node:
            with lone_connection(self._engine(shard)) as conn:
                try:
                    return single_statement.stat(conn, call)
                except DBAPIError as exc:
                    if exc.connection_invalidated:  # a read: safe on a new connection
                        raise Disconnected(exc) from exc
                    raise

        return self._retried(once)

    def listdir(
        self, ns: str, path: str = "/", after: str | None = None, limit: int | None = None
    ) -> list[Node]:
        return self.run(ns, lambda uow: uow.tree.listdir(path, after, limit))

    def walk(self, ns: str, path: str = "/", batch: int = 1000) -> Iterator[Node]:
        """Every node of the subtree (root included) with its full path, streamed in path
        order from one consistent snapshot; holds one pooled connection while iterating."""
        name = paths.validate_namespace(ns)
        engine = self._engine(self.shard_map.shard_of(name))
        try:
            with engine.connect() as conn, conn.begin():
                conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
                check_namespace_exists(conn, name)
                yield from UnitOfWork(conn, name, self.settings.max_depth).tree.walk(path, batch)
        except DBAPIError as exc:
            raise translate(exc) from exc

    # ------------------------------------------------------------ event log

    def read_events(
        self,
        after: int | Start | None = None,
        limit: int = 1000,
        *,
        namespaces: Sequence[str] | None = None,
        partition: Partition | None = None,
        until: int | None = None,
        wait: float = 5.0,
        on_slow: Callable[[list[WriterInFlight]], None] | None = None,
        report_after: float = REPORT_AFTER,
        contents: bool = True,
        bare_types: Collection[str] = (),
        shard: str | None = None,
        copied: bool = False,
        read_ahead: bool = False,
        timings: dict[str, float] | None = None,
    ) -> tuple[list[Event], int]:
        """Events safe to consume after cursor ``after`` (None: from the start; ``"horizon"``:
        from the oldest event compaction kept; ``"now"``: none, and the end of the log),
        in commit-safe position order, and the cursor to pass back. A cursor below the
        compaction horizon raises ``CursorExpired``, one past the end ``CursorAhead``.
        Waits up to ``wait`` seconds for writers in flight; ``on_slow(writers)`` is
        called once if that lasts ``report_after`` seconds; ``contents=False`` reads file
        contents as null; ``bare_types``' events come without their payload (an empty
        object); ``copied=True`` is the change feed's read (a namespace moved
        here reads on through its copied events); ``read_ahead=True`` sends the select
        with the gap-safe bound's statements, in one round trip (for a reader expecting
        a lone change); ``timings`` gets the seconds the gap-safe bound took (``bound``).
        See ``coordinator.event_reader``.

        Each server has its own log, with positions of its own: the log read is the one
        of the server of ``namespaces`` (all on one), or of the server named ``shard``
        (needed, with several servers, to read a whole log)."""
        engine = self._log_engine(namespaces or (), shard)
        try:
            return read_events(
                engine, after, limit, namespaces=namespaces, partition=partition,
                until=until, wait=wait, on_slow=on_slow, report_after=report_after,
                contents=contents, bare_types=bare_types, copied=copied,
                read_ahead=read_ahead, timings=timings,
            )
        except DBAPIError as exc:
            raise translate(exc) from exc

    def wait_indexed(
        self, seq: int, timeout: float = 10.0, consumer: str = DEFAULT_CONSUMER, *,
        namespace: str | None = None,
    ) -> bool:
        """True once the indexer ``consumer`` has applied every event up to position
        ``seq`` (e.g. a ``MutationResult.seq``) to Elasticsearch; False on timeout.
        ``seq`` is a position of the log of ``namespace``'s server (needed with several);
        one up to the namespace's ``log_from`` there (written before it was moved there)
        is done at once. See ``coordinator.indexing``."""
        engine = self._log_engine([namespace] if namespace is not None else (), None)
        try:
            return wait_indexed(engine, seq, timeout, consumer, namespace=namespace)
        except DBAPIError as exc:
            raise translate(exc) from exc

    def _log_engine(self, namespaces: Sequence[str], shard: str | None) -> Engine:
        """The pool of the server whose log holds ``namespaces`` (or named ``shard``)."""
        names = {self.shard_map.shard_of(ns).name
                 for ns in namespaces}
        if shard is not None:
            names.add(shard)
        if not names:
            return self.engine
        if len(names) > 1:
            raise InvalidArgument(
                "a log is read on one database server; these namespaces are on "
                f"{', '.join(sorted(names))}")
        (name,) = names
        for candidate in self.shard_map.shards():
            if candidate.name == name:
                return self._engine(candidate)
        raise InvalidArgument(f"no shard named {name!r}")


def apply_group(
    uow: UnitOfWork, commands: Sequence[Command], max_ops: int
) -> list[MutationResult]:
    """Run ``commands`` in order as one group in ``uow`` (``Coordinator.apply`` inside a
    unit of work the caller runs, e.g. with an idempotency key). A failing command's
    error is raised with its position in ``.index``."""
    group = GroupTx(uow.tree, max_ops)
    results = []
    for index, command in enumerate(commands):
        try:
            results.append(group.execute(command))
        except CoordinatorError as exc:
            exc.index = index
            raise
    return results


class GroupTx(GroupCommands[MutationResult]):
    """The commands and reads of ``Coordinator`` inside one group transaction."""

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
            if is_retryable(exc):
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

    def execute(self, command: Command) -> MutationResult:
        return self._count(self._step(lambda: command.apply(self._tx)))

    def stat(self, path: str) -> Node:
        return self._step(lambda: self._tx.stat(path), mutation=False)

    def get(self, node_id: str) -> Node:
        return self._step(lambda: self._tx.stat(node_id), mutation=False)

    def listdir(
        self, path: str = "/", after: str | None = None, limit: int | None = None
    ) -> list[Node]:
        return self._step(lambda: self._tx.listdir(path, after, limit), mutation=False)
