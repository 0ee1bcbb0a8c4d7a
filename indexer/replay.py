"""Rebuild the search index with no downtime: ``replay`` (from the event log) and
``reindex`` (from a snapshot of ``nodes``), both then catching up on the event tail.

The procedure (``rebuild``), for alias A (e.g. ``pathkeeper-nodes``):

1. take the replay lease for A (a session advisory lock in PostgreSQL; a second
   replay/reindex of A is refused), and delete the half-built indices an earlier,
   killed run left behind (they carry the marker alias ``A-building``; since we
   hold the lease, no living process is building them);
2. pick a bound V0: a safe position of the log (every event <= V0 is committed,
   see ``coordinator.eventlog``), or ``--until``;
3. compute the state as of V0: fold the events <= V0 (replay, ``indexer.setfold``,
   never reading ``nodes``) or read ``nodes`` in one REPEATABLE READ snapshot
   opened *after* V0 was taken (reindex: every event <= V0 is in the snapshot;
   events after V0 that are also in it are re-applied by the tail, harmlessly);
4. bulk-load every document into a NEW concrete index ``A-vN`` (the contract's
   mapping, created by ``indexer.elasticsearch_index``, marked ``A-building``,
   ``refresh_interval: -1`` and no replicas while loading, restored afterwards)
   with external version V0, the same versioning the live worker uses (version =
   the read cursor of the batch);
5. catch up on the events after V0 with the live worker's own batch apply,
   aimed at the new index, until it is close to the head of the log;
6. swap in ONE ``_aliases`` request: remove A from the old index, add A to the
   new one, remove the ``A-building`` marker;
7. catch up once more, to a safe position read after the swap: the live worker
   may have applied events past our cursor to the OLD index just before the
   swap; after the swap it continues on the new index from its own checkpoint,
   so those events are ours to apply (both sides write with external versions
   from the same cursor sequence, so double writes are harmless);
8. move the live consumer's checkpoints (``consumer``, default ``indexer:A``) forward
   to the final position: the new index holds every event up to it. A worker never
   re-applies what is already there, and one whose checkpoint fell below the
   compaction horizon (``indexer.retention``) reads on from here instead of failing;
9. delete the old index unless ``keep_old``.

A replay killed before step 6 leaves A untouched (the half-built index is
deleted by the next run); killed between 6 and 7, the new index may miss the
events of that short window: ``verify`` reports them and ``verify --repair`` or
a rerun fixes them. ``until`` builds a past state into an index that is never
swapped in (for audits). ``namespaces`` rebuilds only those namespaces, in place
in the live index (a partial index cannot replace one serving every namespace):
see ``rebuild_namespaces``.

The state as of V0 comes from ``indexer.setfold``: the newest stored snapshot at or
below V0 plus the events after it, folded by PostgreSQL. Retention (snapshots,
compaction, what compaction gives up) is ``indexer.retention``; a replay ``--until``
below the compaction horizon fails with a ``ReplayError`` saying so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import Connection, Engine, text

from coordinator import Coordinator, Event, Node
from coordinator.db import streamed
from coordinator.event_reader import BoundTimeout, wait_for_bound
from coordinator.event_reader import WriterInFlight as Writer
from coordinator.indexing import consumer_for
from coordinator.node_rows import node_of
from coordinator.subtree import subtree_cte

from . import bulk, checkpoints, contract, deadletters, elasticsearch_index, setfold
from .applier import Applier
from .bulk import Alive, Rejected, resolve_conflicts, stream_answers
from .contract import building_marker, delete_action, index_action, is_indexed
from .prefetch import prefetched
from .progress import Progress
from .search_engine import SearchEngine
from .setfold import SetFold
from .snapshot import node_exists

log = logging.getLogger("pathkeeper.replay")

#: Classid of the replay lease: ``pg_try_advisory_lock(LEASE_CLASS, hashtext(alias))``.
LEASE_CLASS = 0x5245504C  # "REPL"
BULK_CHUNK = 2000
BULK_BYTES = 10 * 1024 * 1024  # Elastic's advice: a few MB to tens of MB per request
TAIL_BATCH = 5000
#: The tail is "caught up" when a read returns fewer events than this.
CAUGHT_UP_EVENTS = 500
#: How long a read of the log waits for writers in flight before replay gives up on it.
BOUND_WAIT = 30.0

class ReplayError(Exception):
    """A replay, reindex or verify could not be done (the message says why)."""


class ReplayBusy(ReplayError):
    """Another replay or reindex of the same alias holds the lease."""


# --------------------------------------------------------------------- the lease


class ReplayLease:
    """A session-level advisory lock on a hash of the alias, on a dedicated connection.

    Held for the whole rebuild; released on exit, or by the server when the
    process dies (the session ends), so a killed replay never blocks the next.
    """

    def __init__(self, engine: Engine, alias: str) -> None:
        self.engine = engine
        self.alias = alias
        self._conn: Connection | None = None

    def __enter__(self) -> ReplayLease:
        conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        got = conn.execute(
            text("SELECT pg_try_advisory_lock(:cls, hashtext(:alias))"),
            {"cls": LEASE_CLASS, "alias": self.alias},
        ).scalar_one()
        if not got:
            pid = conn.execute(
                text(
                    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                    "AND classid = CAST(:cls AS oid) "
                    "AND objid = CAST(CAST(hashtext(:alias) AS bigint) & 4294967295 AS oid) "
                    "LIMIT 1"
                ),
                {"cls": LEASE_CLASS, "alias": self.alias},
            ).scalar()
            conn.close()
            raise ReplayBusy(
                f"another replay or reindex of alias {self.alias!r} is running "
                f"(PostgreSQL backend pid {pid}); wait for it to finish or stop it"
            )
        self._conn = conn
        return self

    def __exit__(self, *exc: object) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.execute(
                text("SELECT pg_advisory_unlock(:cls, hashtext(:alias))"),
                {"cls": LEASE_CLASS, "alias": self.alias},
            )
        finally:
            # Never hand a session that might still hold the lock back to the pool.
            conn.invalidate()
            conn.close()


# ------------------------------------------------------------ the event log


def scan_events(
    conn: Connection,
    *,
    after: int = 0,
    until: int,
    namespaces: Sequence[str] | None = None,
    batch: int = 5000,
) -> Iterator[Event]:
    """Events with ``after < position <= until`` in position order, streamed by a
    server-side cursor. ``until`` must be a safe position (or the caller's snapshot
    must be the one that defines what exists)."""
    where = "position > :after AND position <= :until"
    params: dict[str, Any] = {"after": after, "until": until}
    if namespaces is not None:
        where += " AND namespace = ANY(:nss)"
        params["nss"] = list(namespaces)
    sql = text(
        "SELECT position, namespace, type, node_id, payload, committed_at FROM events "
        f"WHERE {where} ORDER BY position"
    )
    for r in streamed(conn, sql, params, batch):
        yield Event(
            position=int(r.position), namespace=r.namespace, type=r.type,
            node_id=None if r.node_id is None else str(r.node_id), payload=r.payload,
            committed_at=r.committed_at,
        )


def current_bound(engine: Engine, wait: float | None = None) -> int:
    """A safe position: every event at or below it is committed and visible. Raises
    ``ReplayError`` naming the writers still in flight after ``wait`` (default
    ``BOUND_WAIT``) seconds."""
    try:
        return wait_for_bound(engine, BOUND_WAIT if wait is None else wait)
    except BoundTimeout as exc:
        raise ReplayError(f"cannot pick a safe position of the event log: {exc}") from exc


# ------------------------------------------------------------ state sources


def fold_log(
    engine: Engine,
    until: int,
    namespaces: Sequence[str] | None,
    progress: Progress,
) -> SetFold:
    """Fold the log as of ``until`` (replay's source), from the newest snapshot at or below
    it plus the events after it, by PostgreSQL (``indexer.setfold``); the caller closes
    the result. Raises ``ReplayError`` if compaction deleted events it would need."""
    progress.phase("fold events", unit="events")
    try:
        folded = setfold.fold(engine, until=until, namespaces=namespaces)
    except setfold.LogCompacted as exc:
        raise ReplayError(str(exc)) from exc
    progress.advance(folded.events)
    if folded.base.snapshot_id is not None:
        progress.note(f"started from snapshot {folded.base.snapshot_id} "
                      f"(position {folded.base.position}) plus {folded.events} events")
    if folded.anomalies.count:
        progress.note(
            f"the log has {folded.anomalies.count} inconsistencies, first: "
            f"{folded.anomalies.first[:3]} (run `pathkeeper verify` for the full story)"
        )
    return folded


def folded_nodes(folder: SetFold) -> Iterator[Node]:
    """Every indexed node of a folded log."""
    for ns in folder.namespaces():
        for node in folder.trees[ns].nodes():
            if is_indexed(node):
                yield node


def state_nodes(
    stack: ExitStack,
    source: str,
    engine: Engine,
    until: int,
    namespaces: Sequence[str] | None,
    progress: Progress,
) -> Iterator[Node]:
    """The nodes as of ``until``: from the log (folded now, before anything is written)
    or from a snapshot (opened lazily, when the caller starts reading)."""
    if source == "events":
        folder = stack.enter_context(fold_log(engine, until, namespaces, progress))
        return folded_nodes(folder)
    return snapshot_nodes(engine, namespaces)


SNAPSHOT_WALK = subtree_cte(
    ("id", "parent_id", "name", "kind", "version", "content", "metadata"),
    "namespace = :ns AND parent_id IS NULL",
    top_path="CAST('/' AS text)",
)


def walk_nodes(conn: Connection, namespace: str, order_by_id: bool = False) -> Iterator[Node]:
    """Every node of ``namespace`` (root included) with its path, streamed from the
    connection's current transaction; sorted by id when asked."""
    sql = SNAPSHOT_WALK + "SELECT * FROM sub" + (" ORDER BY id" if order_by_id else "")
    for r in streamed(conn, text(sql), {"ns": namespace}, 2000):
        yield node_of(namespace, r, r.path)


def snapshot_nodes(engine: Engine, namespaces: Sequence[str] | None) -> Iterator[Node]:
    """Every indexed node in one REPEATABLE READ snapshot of ``nodes`` (reindex's
    source). The caller takes its bound BEFORE iterating (the snapshot opens here)."""
    with engine.connect() as conn, conn.begin():
        conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
        # Idle between fetches while Elasticsearch loads a chunk: not a hung client.
        conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
        names = list(conn.execute(text("SELECT name FROM namespaces ORDER BY name")).scalars())
        for ns in names:
            if namespaces is not None and ns not in namespaces:
                continue
            for node in walk_nodes(conn, ns):
                if is_indexed(node):
                    yield node


# ------------------------------------------------------- Elasticsearch side


def cleanup_abandoned(es: SearchEngine, alias: str) -> list[str]:
    """Delete the indices a killed rebuild of ``alias`` left (marked ``alias-building``).

    Only call while holding the lease: then no living process is building them.
    """
    doomed = elasticsearch_index.abandoned_indices(es, alias)
    for index in doomed:
        log.warning("deleting %s, left half-built by an earlier rebuild of %s", index, alias)
        es.delete_index(index)
    return doomed


def create_building_index(es: SearchEngine, alias: str, name: str, shards: int = 1) -> str:
    """Create ``name`` for loading, marked as building (``elasticsearch_index``);
    ``ReplayError`` if it appeared meanwhile."""
    if not elasticsearch_index.create_building_index(es, alias, name, shards):
        raise ReplayError(f"index {name} appeared while we created it")
    return name


def bulk_index(
    es: SearchEngine,
    actions: Iterable[dict[str, Any]],
    progress: Progress,
    *,
    alive: Alive | None = None,
    too_large: list[Rejected] | None = None,
) -> tuple[int, int]:
    """Stream ``actions`` through the bulk helper; returns (written, version conflicts).

    With ``alive``, a version conflict is judged as the worker judges it
    (``bulk.resolve_conflicts``): a document edited or deleted by hand is written
    anyway and counted as written; one at least as new stays and is counted as a
    conflict. A document larger than the search server takes in one request can never
    be written: it is left out and added to ``too_large`` (``indexer.bulk``; the caller
    reports it). Any other failure raises ``ReplayError`` (a rebuild must not be swapped
    in with holes)."""
    ok = conflicts = 0
    conflicting: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []

    def settle() -> None:
        nonlocal ok, conflicts
        replaced = resolve_conflicts(es, conflicting, alive=alive)
        ok += sum(replaced)
        conflicts += len(replaced) - sum(replaced)
        conflicting.clear()

    for action, success, info in stream_answers(
        es, actions, refused, chunk_size=BULK_CHUNK, max_chunk_bytes=BULK_BYTES,
        max_retries=5, initial_backoff=0.5, max_backoff=10,
    ):
        item = next(iter(info.values()))
        if success:
            ok += 1
        elif item.get("status") == 409 and alive is not None:
            conflicting.append(action)
            if len(conflicting) >= BULK_CHUNK:
                settle()
        elif item.get("status") == 404 and next(iter(info)) == "delete":
            ok += 1  # deleting what is not there: the goal is reached
        else:
            raise ReplayError(f"bulk write failed: {info}")
        progress.advance(1)
        progress.advance(_left_out(refused, too_large))
    progress.advance(_left_out(refused, too_large))
    settle()
    return ok, conflicts


def _left_out(refused: list[dict[str, Any]], into: list[Rejected] | None) -> int:
    """Move the actions no request could carry from ``refused`` into ``into`` (as
    rejections); how many. Without ``into``, a rebuild cannot leave one out: error."""
    n = len(refused)
    for action in refused:
        rejected = bulk.too_large(action)
        if into is None:
            raise ReplayError(f"bulk write failed: {rejected.node_id}: {rejected.error}")
        log.warning("left out %s %s: %s", rejected.namespace, rejected.node_id, rejected.error)
        into.append(rejected)
    refused.clear()
    return n


# ----------------------------------------------------------------- the tail

#: ``apply(events, cursor)``: apply one ``read_events`` batch at version ``cursor``.
BatchApply = Callable[[list[Event], int], object]


def worker_batch_apply(
    engine: Engine, es: SearchEngine, target: str, rejected: list[Rejected]
) -> BatchApply:
    """The live worker's batch apply (``indexer.applier.Applier``), writing through the
    alias ``target``: the tail is applied exactly as the worker would, so the two
    agree. (The worker writes with ``require_alias``, so the target must be an
    alias: before the swap it is the ``building`` marker, which names exactly the
    new index; after it, the live alias itself.)"""
    applier = Applier(engine, es, target, rejected.append)
    return applier.apply


def catch_up(
    coord: Coordinator,
    after: int,
    apply: BatchApply,
    progress: Progress,
    *,
    until: int | None = None,
    namespaces: Sequence[str] | None = None,
) -> tuple[int, int]:
    """Apply events after ``after`` with ``apply``, in worker-sized batches, up to
    ``until`` (or until a read comes back nearly empty); returns (cursor, events)."""
    cursor, total, stuck = after, 0, 0
    writers: list[Writer] = []
    while True:
        events, nxt = coord.read_events(
            cursor, TAIL_BATCH, namespaces=namespaces, until=until, wait=BOUND_WAIT,
            on_slow=lambda w: writers.__setitem__(slice(None), w),
            contents=False,  # applied as the worker does: from PostgreSQL's rows
        )
        if events:
            apply(events, nxt)
            total += len(events)
            progress.advance(len(events))
        moved = nxt > cursor
        cursor = nxt
        if until is None:
            if len(events) < CAUGHT_UP_EVENTS:
                return cursor, total
        elif cursor >= until:
            return cursor, total
        elif not moved:
            # read_events gave up waiting for transactions in flight: try again, since
            # stopping short of ``until`` would leave a gap.
            stuck += 1
            if stuck > 10:
                names = "; ".join(str(w) for w in writers) or "none seen"
                raise ReplayError(
                    f"could not read the log up to position {until}: writers in flight: {names}"
                )


# ------------------------------------------------------------------ rebuild


def record_left_out(engine: Engine, consumer: str, too_large: list[Rejected]) -> None:
    """Record the documents a rebuild left out as dead letters of the live ``consumer``
    (once a node: the worker may have recorded it already), so ``indexer dead-letters``
    lists them and ``--retry`` writes them once the search server takes them."""
    for rejected in too_large:
        deadletters.record(engine, consumer, rejected, once=True)


@dataclass
class RebuildResult:
    """What a replay or reindex did."""

    source: str
    alias: str
    index: str | None
    position: int
    final_position: int
    documents: int = 0
    tail_events: int = 0
    swapped: bool = False
    old_indices: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    cleaned_up: list[str] = field(default_factory=list)
    dry_run: bool = False
    rejected: int = 0
    #: Documents larger than the search server takes in one request: left out of the
    #: index, recorded as dead letters of the live consumer, reported by the command.
    too_large: list[Rejected] = field(default_factory=list)
    #: Partitions of the live consumer whose checkpoint moved to ``final_position``.
    checkpoints_moved: int = 0
    seconds: float = 0.0


def rebuild(
    coord: Coordinator,
    es: SearchEngine,
    *,
    source: str = "events",
    alias: str = contract.DEFAULT_ALIAS,
    until: int | None = None,
    namespaces: Sequence[str] | None = None,
    dry_run: bool = False,
    keep_old: bool = False,
    progress: Progress | None = None,
    after_load: Callable[[str], None] | None = None,
    consumer: str | None = None,
) -> RebuildResult:
    """Build a new concrete index for ``alias`` from the log (``source="events"``) or
    a snapshot of ``nodes`` (``source="snapshot"``), catch up and swap it in.

    With ``until``, the state as of that position goes into an index that is not
    swapped in (and there is no tail); only then may ``namespaces`` narrow it (an
    index swapped in must hold every namespace: see ``rebuild_namespaces``).
    With ``dry_run``, only counts.
    ``after_load`` is a test hook, called with the index name once loading ends.
    ``consumer`` names the live worker's checkpoints moved after the swap (default
    ``indexer:<alias>``).
    """
    if source not in ("events", "snapshot"):
        raise ValueError(f"unknown source {source!r}")
    if source == "snapshot" and until is not None:
        raise ReplayError("--until needs the event log: use replay, not reindex")
    if namespaces is not None and until is None and not dry_run:
        raise ReplayError("a partial index cannot be swapped in: use rebuild_namespaces")
    progress = progress or Progress(enabled=False)
    started = time.monotonic()
    engine = coord.engine
    with ReplayLease(engine, alias), ExitStack() as stack:
        bound = current_bound(engine)
        v0 = bound if until is None else min(until, bound)
        if until is not None and until > bound:
            progress.note(f"--until {until} is past the safe end of the log; using {bound}")
        result = RebuildResult(source, alias, None, v0, v0, dry_run=dry_run)
        rejected: list[Rejected] = []
        nodes = state_nodes(stack, source, engine, v0, namespaces, progress)
        if dry_run:
            result.documents = sum(1 for _ in nodes)
            result.seconds = time.monotonic() - started
            progress.count("documents", result.documents)
            return result
        # Named before the cleanup, so a new index never reuses a deleted one's name.
        name = elasticsearch_index.next_index_name(es, alias)
        result.cleaned_up = cleanup_abandoned(es, alias)
        shards, replicas = elasticsearch_index.live_shape(es, alias)
        index = create_building_index(es, alias, name, shards)
        result.index = index
        progress.note(f"building {index} as of position {v0} (from {source})")
        progress.phase("load documents", unit="documents")
        docs = prefetched((index_action(index, n, v0) for n in nodes), BULK_CHUNK)
        try:
            result.documents, _ = bulk_index(es, docs, progress, too_large=result.too_large)
        finally:
            docs.close()  # the prefetching thread is done with the fold before it closes
        elasticsearch_index.finish_loading(es, index, replicas)
        if after_load is not None:
            after_load(index)
        if until is not None:
            # An audit index: complete, never swapped in, not cleaned up.
            elasticsearch_index.unmark_building(es, alias, index)
            result.seconds = time.monotonic() - started
            return result
        progress.phase("catch up", unit="events")
        building = worker_batch_apply(engine, es, building_marker(alias), rejected)
        cursor, n = catch_up(coord, v0, building, progress)
        result.tail_events += n
        es.refresh(index)
        # The atomic swap: one request moves the alias and drops the building marker.
        old = elasticsearch_index.switch_alias(es, alias, index, built=True)
        result.swapped, result.old_indices = True, old
        progress.note(f"alias {alias} now points to {index} (was {old or 'nothing'})")
        # Events the live worker applied to the old index just before the swap.
        live = worker_batch_apply(engine, es, alias, rejected)
        cursor, n = catch_up(coord, cursor, live, progress, until=current_bound(engine))
        result.tail_events += n
        result.too_large += [r for r in rejected if r.too_large]
        result.rejected = len(rejected)
        for r in rejected:
            if not r.too_large:
                log.error("document rejected during the tail: %s", r)
        record_left_out(engine, consumer or consumer_for(alias), result.too_large)
        result.final_position = cursor
        result.checkpoints_moved = checkpoints.advance_all(
            engine, consumer or consumer_for(alias), cursor)
        if not keep_old:
            for i in old:
                es.delete_index(i)
                result.deleted.append(i)
        result.seconds = time.monotonic() - started
        return result


def rebuild_namespaces(
    coord: Coordinator,
    es: SearchEngine,
    namespaces: Sequence[str],
    *,
    source: str = "events",
    alias: str = contract.DEFAULT_ALIAS,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> RebuildResult:
    """Rebuild only ``namespaces``, in place in the index behind ``alias``.

    Every document is written at external version V0 (a safe position), so a
    document the live worker already wrote from a later event is kept; then
    every document of those namespaces that the state at V0 does not have is
    deleted at version V0 (again keeping anything written after V0). A document
    edited or deleted by hand is rewritten (``bulk.resolve_conflicts``). No new
    index, no swap: the live worker keeps going meanwhile.
    """
    progress = progress or Progress(enabled=False)
    started = time.monotonic()
    engine = coord.engine
    wanted = sorted(set(namespaces))
    with ReplayLease(engine, alias), ExitStack() as stack:
        v0 = current_bound(engine)
        result = RebuildResult(source, alias, None, v0, v0, dry_run=dry_run)
        nodes = state_nodes(stack, source, engine, v0, wanted, progress)
        if dry_run:
            result.documents = sum(1 for _ in nodes)
            result.seconds = time.monotonic() - started
            return result
        targets = elasticsearch_index.alias_targets(es, alias)
        if not targets:
            raise ReplayError(f"alias {alias!r} does not exist: run a full replay")
        index = targets[-1]
        result.index = index
        progress.phase("rewrite documents", unit="documents")
        # The ids that exist at V0, to find the extras afterwards: the one structure
        # that grows with the namespace (an id and a set slot, ~100 bytes each).
        kept: dict[str, set[str]] = {ns: set() for ns in wanted}

        def actions() -> Iterator[dict[str, Any]]:
            for node in nodes:
                kept[node.namespace].add(node.id)
                yield index_action(index, node, v0)

        # Conflicts judged as the worker judges them: a document edited or deleted by
        # hand is rewritten, one the live worker wrote after V0 stays.
        alive = partial(node_exists, engine)
        result.documents, _ = bulk_index(es, actions(), progress, alive=alive,
                                         too_large=result.too_large)
        record_left_out(engine, consumer_for(alias), result.too_large)
        es.refresh(index)
        from .index_scan import stream_index_docs

        progress.phase("delete extras", unit="documents")
        deletions: list[dict[str, Any]] = []
        for ns in wanted:
            for doc in stream_index_docs(es, alias, ns):
                if doc["node_id"] not in kept[ns]:
                    deletions.append(delete_action(index, ns, doc["node_id"], v0))
        bulk_index(es, deletions, progress, alive=alive)
        es.refresh(index)
        result.seconds = time.monotonic() - started
        return result


