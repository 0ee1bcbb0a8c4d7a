"""Moving a namespace online from one PostgreSQL server (shard) to another: the steps of
docs/sharding.md section 3, in order, each recorded in the directory's ``moves.step``
before it runs and each idempotent, so ``resume`` re-runs from the recorded step after a
crash anywhere, and ``abort`` undoes any step before ``flip``.

The namespace is writable on at most one shard at every moment: the source until the
freeze (step ``frozen``, the shard fence), the target from the flip. Between them (the
*freeze*: steps ``frozen`` to ``flip``) its writes are refused with ``NamespaceFrozen``
(retry after a second) and its reads go on on the source. The replication itself
(publication, subscription, slot) is ``coordinator.move_replication``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg
from psycopg.rows import TupleRow

from . import move_replication as repl
from . import move_snapshot
from .db import libpq_url
from .errors import CoordinatorError, InvalidArgument
from .indexing import DEFAULT_CONSUMER
from .move_replication import Conn
from .results import POSITION_BLOCK, block_end

#: The steps, in order (``moves.step``).
STEPS = ("planned", "copying", "syncing", "frozen", "draining", "sequence", "flip", "cleanup")
#: The steps ``abort`` can undo (``flip`` too until its first part has run).
ABORTABLE_STEPS = STEPS[: STEPS.index("flip")]
#: The class of the advisory lock a mover holds on the directory, per namespace, for as
#: long as it runs a move (its session's: a killed mover's goes with its connection), so
#: two movers never run steps of one move at once.
MOVER_LOCK_CLASS = 0x504B4D56  # "PKMV"
#: The channel the flip notifies (the directory's cache listens on it); the payload is
#: the namespace.
PLACEMENTS_CHANNEL = "pathkeeper_placements"


class MoveRefused(InvalidArgument):
    """A move that cannot start, resume or abort as asked (nothing was changed)."""


class MoveFailed(CoordinatorError):
    """A step of a move could not finish; the move stays recorded where it stopped
    (``pathkeeper shard move --resume`` or ``--abort``)."""


class MoveStopped(CoordinatorError):
    """The move stopped after the step it was asked to stop after (a test hook)."""


@dataclass
class Move:
    """A move in flight: its row of the directory's ``moves``."""

    namespace: str
    source: str
    target: str
    step: str
    source_last: int | None = None


@dataclass
class MoveResult:
    namespace: str
    source: str
    target: str
    #: Seconds per step run by this call.
    step_seconds: dict[str, float] = field(default_factory=dict)
    #: Seconds the namespace took no writes (steps frozen to flip), when this call ran
    #: all of them; else 0.
    freeze_seconds: float = 0.0


def _one(conn: Conn, query: str, params: tuple[object, ...] = ()) -> TupleRow | None:
    return conn.execute(query.encode(), params).fetchone()


def _int(value: object) -> int:
    assert isinstance(value, int)
    return value


class NamespaceMover:
    """Runs, resumes and aborts moves recorded in the directory at ``directory_url``.

    ``consumer``: the indexer consumer whose checkpoint of the namespace's partition on
    the source the drain waits for (the source's worker has indexed every event of the
    namespace before the target's takes over). A source where the consumer never ran
    (no indexer) is not waited for. ``progress`` gets one line per step."""

    def __init__(self, directory_url: str, *, consumer: str = DEFAULT_CONSUMER,
                 progress: Callable[[str], None] | None = None,
                 sync_timeout: float = 3600.0, drain_timeout: float = 60.0,
                 sync_lag_bytes: int = 16 << 20, connect_timeout: float = 5.0) -> None:
        self.directory_url = libpq_url(directory_url)
        self.consumer = consumer
        self.progress = progress or (lambda line: None)
        self.sync_timeout = sync_timeout
        self.drain_timeout = drain_timeout
        self.sync_lag_bytes = sync_lag_bytes
        self.connect_timeout = connect_timeout
        self._urls: dict[str, str] = {}
        self._conns: dict[str, Conn] = {}
        #: Per namespace, when this mover's draft of its flip snapshot began
        #: (``move_snapshot.write_draft``); a resumed move without it compares every row.
        self._drafted: dict[str, int] = {}

    # -- connections ---------------------------------------------------------------

    def _connect(self, conninfo: str) -> Conn:
        return psycopg.connect(conninfo, autocommit=True,
                               connect_timeout=max(1, int(self.connect_timeout)),
                               application_name="pathkeeper-move")

    def _kept(self, key: str, conninfo: str) -> Conn:
        """The connection kept for ``key`` during one call (``close``), opened on first
        use: a step of the freeze should not pay for connecting."""
        conn = self._conns.get(key)
        if conn is None or conn.closed or conn.broken:
            try:
                conn = self._conns[key] = self._connect(conninfo)
            except psycopg.OperationalError as exc:
                what = f"shard {key[6:]}" if key.startswith("shard:") else "the directory"
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else "no answer"
                raise MoveFailed(f"cannot reach {what} ({first}); the move stays where it "
                                 "stopped: --resume or --abort once it is back") from None
        return conn

    def close(self, keep_lock: bool = False) -> None:
        """Close the connections kept by the last call (with ``keep_lock``, not the one
        holding the mover's lock: a move stopped by the test hook stays claimed)."""
        for key, conn in list(self._conns.items()):
            if not (keep_lock and key == "lock"):
                conn.close()
                del self._conns[key]

    def _claim(self, namespace: str) -> None:
        """Take the mover's lock of ``namespace`` (``MOVER_LOCK_CLASS``), or refuse."""
        row = _one(self._kept("lock", self.directory_url),
                   "SELECT pg_try_advisory_lock(%s, "
                   "CAST(hashtext(%s)::bigint & 2147483647 AS integer))",
                   (MOVER_LOCK_CLASS, namespace))
        if not (row and row[0]):
            raise MoveRefused(f"another mover is running the move of namespace {namespace}: "
                              "wait for it to end, or stop it first")

    @contextmanager
    def _directory(self) -> Iterator[Conn]:
        yield self._kept("", self.directory_url)

    def _url(self, shard: str) -> str:
        if shard not in self._urls:
            with self._directory() as d:
                row = _one(d, "SELECT url FROM shards WHERE name = %s", (shard,))
            if row is None:
                raise MoveRefused(f"no shard {shard} in the directory")
            self._urls[shard] = libpq_url(str(row[0]))
        return self._urls[shard]

    @contextmanager
    def _shard(self, shard: str) -> Iterator[Conn]:
        yield self._kept(f"shard:{shard}", self._url(shard))

    def _reachable(self, shard: str) -> bool:
        try:
            with self._connect(self._url(shard)) as conn:
                conn.execute(b"SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    # -- the directory's record ------------------------------------------------------

    def _load(self, namespace: str) -> Move:
        with self._directory() as d:
            row = _one(d, "SELECT source, target, step, source_last FROM moves "
                          "WHERE namespace = %s", (namespace,))
        if row is None:
            raise MoveRefused(f"no move of namespace {namespace} is in flight")
        return Move(namespace, str(row[0]), str(row[1]), str(row[2]),
                    None if row[3] is None else _int(row[3]))

    def _record(self, move: Move, step: str) -> None:
        with self._directory() as d:
            d.execute(b"UPDATE moves SET step = %s, updated_at = now() WHERE namespace = %s",
                      (step, move.namespace))
        move.step = step

    # -- the three entry points ----------------------------------------------------------

    def start(self, namespace: str, target: str, stop_after: str | None = None) -> MoveResult:
        """Move ``namespace`` to the shard named ``target``: check, record, run every step."""
        self._check_stop(stop_after)
        stopped = False
        try:
            self._claim(namespace)
            return self._start(namespace, target, stop_after)
        except MoveStopped:
            stopped = True
            raise
        finally:
            self.close(keep_lock=stopped)

    def _start(self, namespace: str, target: str, stop_after: str | None) -> MoveResult:
        with self._directory() as d:
            placed = _one(d, "SELECT shard FROM placements WHERE namespace = %s", (namespace,))
            if placed is None:
                raise MoveRefused(f"no namespace {namespace} in the directory")
            source = str(placed[0])
            if _one(d, "SELECT 1 FROM shards WHERE name = %s", (target,)) is None:
                raise MoveRefused(f"no shard {target} in the directory")
            if source == target:
                raise MoveRefused(f"namespace {namespace} is already on shard {target}")
            in_flight = _one(d, "SELECT step FROM moves WHERE namespace = %s", (namespace,))
            if in_flight is not None:
                raise MoveRefused(
                    f"a move of namespace {namespace} is in flight (step {in_flight[0]}): "
                    "resume it with --resume or undo it with --abort")
        move = Move(namespace, source, target, "planned")
        self._check_shards(move)
        with self._directory() as d:
            try:
                d.execute(b"INSERT INTO moves (namespace, source, target, step) "
                          b"VALUES (%s, %s, %s, 'planned')", (namespace, source, target))
            except psycopg.errors.UniqueViolation:
                raise MoveRefused(
                    f"a move of namespace {namespace} is in flight: resume it with --resume "
                    "or undo it with --abort") from None
        return self._run(move, stop_after)

    def resume(self, namespace: str, stop_after: str | None = None) -> MoveResult:
        """Run a recorded move on from its recorded step (which runs again)."""
        self._check_stop(stop_after)
        stopped = False
        try:
            self._claim(namespace)
            return self._run(self._load(namespace), stop_after)
        except MoveStopped:
            stopped = True
            raise
        finally:
            self.close(keep_lock=stopped)

    def abort(self, namespace: str) -> None:
        """Undo a move stopped before the flip: the target keeps nothing of the
        namespace (rows, subscription, fence row), the source is writable again and
        keeps no slot or publication. With the source down, the target is cleaned and
        ``MoveFailed`` says to abort again once the source is back (its slot, its
        publication and the freeze are undone then)."""
        try:
            self._claim(namespace)
            self._abort(namespace)
        finally:
            self.close()

    def _abort(self, namespace: str) -> None:
        move = self._load(namespace)
        if move.step not in ABORTABLE_STEPS and not (
                move.step == "flip" and not self._target_active(move)):
            raise MoveRefused(
                f"the move of namespace {namespace} is past its flip (step {move.step}): "
                "it can only go forward: --resume")
        name = repl.replication_name(namespace)
        source_up = self._reachable(move.source)
        with self._shard(move.target) as target:
            repl.drop_subscription(target, name, source_reachable=source_up)
            self._delete_rows(target, namespace)
            target.execute(b"DELETE FROM namespace_placement WHERE namespace = %s "
                           b"AND state = 'incoming'", (namespace,))
        if not source_up:
            raise MoveFailed(
                f"shard {move.source} (the source) is unreachable: the target is clean; run "
                f"the abort again once it is back, to undo the freeze and drop the slot and "
                f"the publication {name} there")
        with self._shard(move.source) as source:
            source.execute(b"SELECT pathkeeper_unfreeze_namespace(%s)", (namespace,))
            repl.drop_slot(source, name)
            repl.drop_publication(source, name)
        with self._directory() as d:
            d.execute(b"DELETE FROM moves WHERE namespace = %s", (namespace,))
        self.progress(f"aborted the move of {namespace} at step {move.step}")

    # -- running ---------------------------------------------------------------------

    @staticmethod
    def _check_stop(stop_after: str | None) -> None:
        if stop_after is not None and stop_after not in STEPS:
            raise MoveRefused(f"no step {stop_after}; the steps are {', '.join(STEPS)}")

    def _run(self, move: Move, stop_after: str | None) -> MoveResult:
        result = MoveResult(move.namespace, move.source, move.target)
        frozen_since: float | None = None
        for step in STEPS[STEPS.index(move.step):]:
            if move.step != step:
                self._record(move, step)
            started = time.monotonic()
            if step == "frozen":
                frozen_since = started
            getattr(self, f"_step_{step}")(move)
            took = time.monotonic() - started
            result.step_seconds[step] = took
            self.progress(f"{step}: done in {took:.3f} s")
            if step == "flip" and frozen_since is not None:
                result.freeze_seconds = time.monotonic() - frozen_since
                self.progress(f"freeze (frozen to flip): {result.freeze_seconds:.3f} s")
            if step == stop_after and step != "cleanup":
                raise MoveStopped(f"stopped after step {step} (as asked)")
        with self._directory() as d:
            d.execute(b"DELETE FROM moves WHERE namespace = %s", (move.namespace,))
        self.progress(f"moved {move.namespace} from {move.source} to {move.target}")
        return result

    # -- step 0: planned -------------------------------------------------------------------

    def _check_shards(self, move: Move) -> None:
        """The checks of step 0; none of them changes anything."""
        ns = move.namespace
        with self._shard(move.source) as source, self._shard(move.target) as target:
            heads = []
            for role, conn in (("source", source), ("target", target)):
                version = _int(_one(conn, "SELECT current_setting('server_version_num')::int")
                               [0])  # type: ignore[index]
                if version < 150000:
                    raise MoveRefused(f"the {role} runs PostgreSQL {version // 10000}; a move "
                                      "needs 15 or later (row-filtered publications)")
                heads.append(_one(conn, "SELECT version_num FROM alembic_version"))
            if heads[0] != heads[1]:
                raise MoveRefused("the source and the target are at different migrations "
                                  f"({heads[0]} and {heads[1]}): upgrade both first")
            level = _one(source, "SHOW wal_level")
            if level is None or level[0] != "logical":
                raise MoveRefused("the source's wal_level is not logical (set wal_level = "
                                  "logical and restart it)")
            if _one(source, "SELECT 1 FROM namespaces WHERE name = %s", (ns,)) is None:
                raise MoveRefused(f"namespace {ns} is not on its shard {move.source}")
            for table, column in repl.PUBLISHED_TABLES:
                if _one(target, f"SELECT 1 FROM {table} WHERE {column} = %s LIMIT 1", (ns,)):
                    raise MoveRefused(f"the target {move.target} holds rows of namespace {ns} "
                                      f"already ({table}): remove them first")
            fence = _one(target, "SELECT state FROM namespace_placement WHERE namespace = %s",
                         (ns,))
            if fence is not None and fence[0] not in ("gone", "incoming"):
                raise MoveRefused(f"the target {move.target} has namespace {ns} as "
                                  f"{fence[0]}: finish or undo the move that left it")

    def _step_planned(self, move: Move) -> None:
        self._check_shards(move)
        with self._shard(move.target) as target:
            # 'incoming': the shard's writers and log consumers leave the namespace alone
            # while its rows arrive.
            target.execute(
                b"INSERT INTO namespace_placement (namespace, state) VALUES (%s, 'incoming') "
                b"ON CONFLICT (namespace) DO UPDATE SET state = 'incoming', log_from = 0, "
                b"frozen_at = NULL, updated_at = now()", (move.namespace,))

    # -- steps 1-2: copying, syncing -------------------------------------------------------

    def _step_copying(self, move: Move) -> None:
        name = repl.replication_name(move.namespace)
        with self._shard(move.source) as source, self._shard(move.target) as target:
            repl.create_publication(source, name, move.namespace)
            repl.create_subscription(target, source, name, self._url(move.source))

    def _step_syncing(self, move: Move) -> None:
        name = repl.replication_name(move.namespace)
        with self._shard(move.source) as source, self._shard(move.target) as target:
            def synced() -> bool:
                if repl.tables_not_ready(target, name):
                    return False
                lag = repl.slot_lag(source, name)
                return lag is not None and lag <= self.sync_lag_bytes

            if not repl.wait(synced, self.sync_timeout, 0.1):
                raise MoveFailed(
                    f"the copy of namespace {move.namespace} did not catch up in "
                    f"{self.sync_timeout:.0f} s: --resume to wait on, or --abort")
            # The copy filled tables the target's planner may know as empty: until
            # autovacuum comes round, a walk of the namespace (verify, a rebuild) would be
            # planned for a few rows. Analyzed now, outside the freeze.
            repl.analyze_published(target)
            # The source's indexer, too, catches up with the namespace now, so that the
            # drain (inside the freeze) waits for the last writes only.
            partition = self._partition(source, move.namespace)
            if partition is not None:
                last = _one(source, "SELECT last_value FROM event_position_seq")
                assert last is not None
                end = block_end(_int(last[0]))
                if not repl.wait(lambda: self._indexed(source, partition, end),
                                 self.sync_timeout, 0.1):
                    raise MoveFailed(
                        f"the source's indexer ({self.consumer}) did not catch up with "
                        f"namespace {move.namespace} in {self.sync_timeout:.0f} s: --resume "
                        "to wait on, or --abort")
            # The namespace's snapshot for the flip, drafted now: the freeze finishes it.
            self._drafted[move.namespace] = move_snapshot.write_draft(target, move.namespace)

    # -- steps 3-5: frozen, draining, sequence ---------------------------------------------

    def _step_frozen(self, move: Move) -> None:
        with self._shard(move.source) as source:
            row = _one(source, "SELECT state, frozen_at FROM namespace_placement "
                               "WHERE namespace = %s", (move.namespace,))
            if row is not None and row[0] == "frozen" and row[1] is not None:
                # Frozen by a run that died before recording it: the same L_s.
                last = _int(row[1]) - (POSITION_BLOCK - 1)
            else:
                frozen = _one(source, "SELECT pathkeeper_freeze_namespace(%s)",
                              (move.namespace,))
                assert frozen is not None
                last = _int(frozen[0])
        with self._directory() as d:
            d.execute(b"UPDATE moves SET source_last = %s, flip_position = %s, "
                      b"updated_at = now() WHERE namespace = %s",
                      (last, block_end(last), move.namespace))
        move.source_last = last

    def _frozen_at(self, move: Move) -> int:
        assert move.source_last is not None, "the freeze recorded no position"
        return block_end(move.source_last)

    def _step_draining(self, move: Move) -> None:
        name = repl.replication_name(move.namespace)
        frozen_at = self._frozen_at(move)
        with self._shard(move.source) as source, self._shard(move.target) as target:
            lsn = repl.wal_position(source)
            partition = self._partition(source, move.namespace)
            if partition is None:
                self.progress(f"draining: no indexer consumer {self.consumer} on the source: "
                              "not waiting for it")
            else:
                # Wake the namespace's partition runner: it reads up to the new bound and
                # checkpoints past frozen_at without waiting for its next poll.
                source.execute(b"SELECT pg_notify('pathkeeper_events', "
                               b"CAST(hashtext(%s)::bigint & 2147483647 AS text))",
                               (move.namespace,))

            started = time.monotonic()
            took: dict[str, float] = {}

            def drained() -> bool:
                if "applied" not in took and repl.confirmed_past(source, name, lsn):
                    took["applied"] = time.monotonic() - started
                if "indexed" not in took and (
                        partition is None or self._indexed(source, partition, frozen_at)):
                    took["indexed"] = time.monotonic() - started
                return len(took) == 2

            del target
            if not repl.wait(drained, self.drain_timeout, 0.01):
                raise MoveFailed(
                    f"namespace {move.namespace} did not drain in {self.drain_timeout:.0f} s "
                    "(the target's copy or the source's indexer is behind): --resume to wait "
                    "on, or --abort")
            self.progress(f"draining: the target applied everything in {took['applied']:.3f} s, "
                          f"the source's indexer caught up in {took['indexed']:.3f} s")

    def _partition(self, source: Conn, namespace: str) -> int | None:
        """The partition (of the consumer's layout on the source) holding ``namespace``,
        as ``event_reader.Partition`` hashes it; None if the consumer never ran there."""
        row = _one(source, "SELECT count(*) FROM checkpoints WHERE consumer = %s",
                   (self.consumer,))
        count = _int(row[0]) if row else 0
        if not count:
            return None
        hashed = _one(source, "SELECT mod(hashtext(%s)::bigint & 2147483647, %s)",
                      (namespace, count))
        assert hashed is not None
        return _int(hashed[0])

    def _indexed(self, source: Conn, partition: int, position: int) -> bool:
        row = _one(source, "SELECT position >= %s FROM checkpoints "
                           "WHERE consumer = %s AND partition = %s",
                   (position, self.consumer, partition))
        return bool(row and row[0])

    def _step_sequence(self, move: Move) -> None:
        assert move.source_last is not None
        for _ in range(5):
            with self._shard(move.target) as target:
                try:
                    with target.transaction():
                        target.execute(b"SET LOCAL lock_timeout = '200ms'")
                        # No claim runs while this is held: the sequence only moves forward
                        # under the readers (coordinator.event_reader).
                        target.execute(b"LOCK TABLE pathkeeper_locks.position_lock "
                                       b"IN EXCLUSIVE MODE")
                        target.execute(b"SELECT setval('event_position_seq', %s, true) "
                                       b"FROM event_position_seq WHERE last_value < %s",
                                       (move.source_last, move.source_last))
                    return
                except psycopg.errors.LockNotAvailable:
                    time.sleep(0.2)
        reason = ("the target's position lock stayed taken (a long write, an import?) "
                  "through 5 tries of 200 ms")
        self._abort(move.namespace)
        raise MoveFailed(f"the move of namespace {move.namespace} was undone: {reason}")

    # -- steps 6-7: flip, cleanup ------------------------------------------------------------

    def _target_active(self, move: Move) -> bool:
        with self._shard(move.target) as target:
            row = _one(target, "SELECT state FROM namespace_placement WHERE namespace = %s",
                       (move.namespace,))
        return row is not None and row[0] == "active"

    def _step_flip(self, move: Move) -> None:
        ns = move.namespace
        flip = self._frozen_at(move)
        # (a) the target owns the namespace, its log there beginning after flip, with a
        # snapshot of its rows (final: nothing has changed them since the drain).
        with self._shard(move.target) as target, target.transaction():
            row = _one(target, "SELECT state, log_from FROM namespace_placement "
                               "WHERE namespace = %s FOR UPDATE", (ns,))
            if row is None or row[0] != "active":
                target.execute(
                    b"INSERT INTO namespace_placement (namespace, state, log_from) "
                    b"VALUES (%s, 'active', %s) ON CONFLICT (namespace) DO UPDATE SET "
                    b"state = 'active', log_from = EXCLUDED.log_from, frozen_at = NULL, "
                    b"updated_at = now()", (ns, flip))
                move_snapshot.finish(target, ns, flip, self._drafted.get(ns))
        # (b) the directory routes to the target: one transaction with the step.
        with self._directory() as d, d.transaction():
            placed = _one(d, "SELECT shard FROM placements WHERE namespace = %s FOR UPDATE",
                          (ns,))
            if placed is not None and placed[0] == move.source:
                d.execute(b"UPDATE placements SET shard = %s, epoch = epoch + 1, "
                          b"updated_at = now() WHERE namespace = %s", (move.target, ns))
            d.execute(b"UPDATE moves SET step = 'cleanup', updated_at = now() "
                      b"WHERE namespace = %s", (ns,))
            d.execute(b"SELECT pg_notify(%s, %s)", (PLACEMENTS_CHANNEL, ns))
        move.step = "cleanup"
        self._source_gone(move)

    def _source_gone(self, move: Move) -> None:
        """(c) the source's fence says the namespace is elsewhere (refused as moved)."""
        with self._shard(move.source) as source:
            source.execute(b"UPDATE namespace_placement SET state = 'gone', updated_at = now() "
                           b"WHERE namespace = %s AND state <> 'gone'", (move.namespace,))

    def _step_cleanup(self, move: Move) -> None:
        ns = move.namespace
        name = repl.replication_name(ns)
        self._source_gone(move)
        with self._shard(move.source) as source, self._shard(move.target) as target:
            # The subscription first: the deletes below must not reach the target.
            repl.drop_subscription(target, name, source_reachable=True)
            repl.drop_slot(source, name)
            repl.drop_publication(source, name)
            self._copy_dead_letters(source, target, ns)
            self._delete_rows(source, ns)

    @staticmethod
    def _copy_dead_letters(source: Conn, target: Conn, ns: str) -> None:
        """The namespace's dead letters, with the target's own ids; a letter copied by an
        earlier run (same consumer, position, node and time) is not copied again."""
        letters = source.execute(
            b"SELECT consumer, position, node_id, error, document, created_at, retried_at "
            b"FROM dead_letters WHERE namespace = %s ORDER BY id", (ns,)).fetchall()
        with target.transaction():
            for letter in letters:
                target.execute(
                    b"INSERT INTO dead_letters (namespace, consumer, position, node_id, error, "
                    b"document, created_at, retried_at) SELECT %s, %s, %s, %s, %s, %s, %s, %s "
                    b"WHERE NOT EXISTS (SELECT 1 FROM dead_letters WHERE namespace = %s AND "
                    b"consumer = %s AND position = %s AND node_id IS NOT DISTINCT FROM %s "
                    b"AND created_at = %s)",
                    (ns, *letter, ns, letter[0], letter[1], letter[2], letter[5]))

    @staticmethod
    def _delete_rows(conn: Conn, ns: str, batch: int = 10000) -> None:
        """Every row of the namespace on this shard, in batches, writing no events (a
        logical delete would make the indexer delete the namespace's documents)."""
        for table in ("events", "idempotency_keys", "log_snapshot_nodes", "dead_letters"):
            while conn.execute(
                    f"DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table} "
                    "WHERE namespace = %s LIMIT %s))".encode(), (ns, batch)).rowcount:
                pass
        conn.execute(b"DELETE FROM log_snapshots WHERE namespace = %s", (ns,))
        # Cascades to the namespace's nodes.
        conn.execute(b"DELETE FROM namespaces WHERE name = %s", (ns,))
