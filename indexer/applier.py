"""Applying batches of events to Elasticsearch: the heart of the indexer.

"Events say WHAT changed; PostgreSQL says what it IS now."

For a batch read with ``read_events(after=checkpoint)`` and its cursor ``C``
(every event ``<= C`` has committed, none above it was read), let ``V`` be the
position of the batch's last event. Work comes in two parts, each applied from
ONE REPEATABLE READ snapshot taken after the batch was read (so it contains every
change ``<= C``, and maybe later ones; a node part read by one statement takes that
statement's own snapshot, in autocommit):

* **nodes** (``apply_nodes``): each node an event names (created, written,
  moved, deleted): its current row and path at external version ``V``, or a
  ``delete`` at ``V`` if the row is gone. One document per event at most: fast.
* **subtrees** (``apply_subtrees``, a ``SubtreeWork`` that may merge several
  consecutive batches): for each moved directory its whole current subtree,
  streamed from a server-side cursor (this rewrites ``path`` of every
  descendant); then, if anything can be left under a stale path, ONE refresh
  (search is near-real-time) and ONE sweep: the documents under each deleted path
  / dropped namespace, and under each moved directory's old path if a node may
  have left a moved subtree since the move (``Applier._sweeps``), whose ``seq`` is
  below the position of the event that made that path stale (``indexer.plan``;
  one search for all paths uses the highest of those positions, which can only
  add documents to reconcile); each is rewritten from its current row or deleted
  if gone (at the version of the last merged batch). This finds the descendants
  of deleted subtrees, which PostgreSQL no longer has, and the documents of a
  subtree moved and then deleted, which still carry the old path. A load of
  file renames and moves and of directory renames in place needs none.

The one rule every write follows, whichever part or worker thread makes it:

    a document is written at a version ``v <= C`` of a batch read BEFORE the
    snapshot it was read from was taken, and every event that changes a
    document (its own, a move of an ancestor, a recursive delete of an
    ancestor) leads to a write of it at a version ``>=`` that event's position.

Then the write with the highest version comes from a snapshot holding every
event up to that version, and any later event would have led to a higher one:
Elasticsearch's external versioning ("keep the write with the greater version")
ends with the document as PostgreSQL has it, whatever order the writes arrive
in. That is why the two parts can run in different threads (``indexer.partition_runner``:
the node lane never waits for a big subtree), why several batches' subtree
work can be merged into one pass with at most one refresh and one sweep, and why
a pass may keep several bulk requests in flight at once (``bulk.send_chunks``).

**Which version a subtree document gets.** Not ``V``: a descendant is written at
the position of the last move (among those being applied) of a directory on its
way down from the subtree's top (``live_nodes.stream_subtree_entries``). That
position lies in ``(previous checkpoint, C]``, so the rule above holds, and it
depends only on the events, not on where a batch ended or how many were merged:
a worker killed in the middle of a 100,000-descendant rename re-reads from the
checkpoint and finds every document it already wrote answered by 409 (cheap)
instead of rewriting them all. A descendant whose own event the node part wrote
at a version at least as high is skipped.

Why this is safe, in the terms of the rule:

* Every write carries a version within its batch's range, above every earlier
  batch's and at most its read cursor, so a document never goes backwards, even
  if two workers briefly apply the same partition.
* Re-applying after a crash rewrites the same or newer state at the same or a
  higher version: idempotent. A 409 version conflict means "newer already there".
* Deleted, then recreated: node ids are UUIDs never reused, so a recreated path
  is a new document. A delete leaves a tombstone (with its version) that rejects
  older writes for ``index.gc_deletes``; we set it to 1 h (``indexer.contract``)
  and abandon any attempt older than ``MAX_BATCH_AGE`` (30 min), so a write
  from a stale snapshot can never outlive the tombstone it must lose against.
* The checkpoint moves past a batch only after Elasticsearch acknowledged both
  parts of it (``indexer.partition_runner.publish_checkpoint``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import Connection, Engine

from coordinator import Event, Node

from .bulk import (
    CHUNK_BYTES,
    IN_FLIGHT,
    PASS_CHUNK_BYTES,
    BulkStats,
    Rejected,
    send,
    send_request,
    send_stream,
)
from .contract import MAX_BATCH_AGE, RENDERED, delete_action, rendered_action, stale_under_query
from .errors import IndexerError
from .live_nodes import (
    fetch_entries,
    fetch_nodes,
    may_have_left,
    node_exists,
    stream_subtree_entries,
)
from .plan import BatchPlan, all_sweeps, plan_batch
from .search_engine import SearchEngine

ID_CHUNK = 1000
SWEEP_PAGE = 1000
#: Paths per sweep search (values of one ``terms`` filter).
SWEEP_CLAUSES = 1024


class Abandoned(IndexerError):
    """The batch was given up (shutdown requested, or too old): not applied, not
    checkpointed; applying it again later is safe."""


@dataclass
class BatchResult:
    events: int
    version: int
    stats: BulkStats
    swept: bool
    seconds: float


@dataclass(frozen=True)
class NodeActions:
    """A batch's node documents read from PostgreSQL, not yet sent (``Applier.read_nodes``);
    ``actions`` None: too many to hold, ``send_nodes`` streams them."""

    plan: BatchPlan
    version: int
    actions: list[dict[str, Any]] | None


@dataclass
class NamespaceWork:
    #: moved directory id -> position of its last move.
    moves: dict[str, int] = field(default_factory=dict)
    #: path -> sweep documents below it with ``seq`` under this position (deletes, drops).
    sweep_before: dict[str, int] = field(default_factory=dict)
    #: The same for the old paths of moved directories: swept only if a node may have
    #: left a moved subtree since ``first_move`` (``apply_subtrees``).
    moved_from: dict[str, int] = field(default_factory=dict)
    first_move: int | None = None
    #: node id -> version the node part already wrote it at (skipped when high enough).
    written: dict[str, int] = field(default_factory=dict)


@dataclass
class SubtreeWork:
    """The subtree rewrites and sweeps of one batch, or of several consecutive
    batches merged (``merge``): one snapshot, at most one refresh and one sweep for
    all."""

    #: The checkpoint before the first batch merged in: the partition's checkpoint
    #: may not pass it until this work is done.
    after: int
    #: The read cursor after the last batch merged in.
    cursor: int
    #: ``V`` of the last batch merged in: the version of the sweep's reconciling writes.
    version: int
    namespaces: dict[str, NamespaceWork] = field(default_factory=dict)
    batches: int = 1
    #: Seconds spent per phase by the last ``apply_subtrees`` (for the log).
    timings: dict[str, float] = field(default_factory=dict)
    #: Paths the last ``apply_subtrees`` swept (for the log).
    swept: int = 0

    @classmethod
    def from_plan(cls, plan: BatchPlan, after: int, cursor: int, version: int) -> SubtreeWork:
        work = cls(after=after, cursor=cursor, version=version)
        for ns, p in plan.namespaces.items():
            if p.moves or p.sweep_before:
                work.namespaces[ns] = NamespaceWork(
                    dict(p.moves), dict(p.sweep_before), dict(p.moved_from), p.first_move,
                    dict.fromkeys(p.nodes, version),
                )
        return work

    @property
    def empty(self) -> bool:
        return not self.namespaces

    def merge(self, later: SubtreeWork) -> SubtreeWork:
        """This work followed by ``later``'s (the batches right after it), as one.

        Moves and sweeps keep their highest position, the first move its lowest; the
        versions of documents the node part wrote keep the latest. Safe because the
        merged work is applied from a snapshot taken after the last merged batch was
        read, and every version in it is at most that batch's cursor."""
        assert later.after >= self.cursor, "merged out of order"
        for ns, w in later.namespaces.items():
            mine = self.namespaces.setdefault(ns, NamespaceWork())
            for d, pos in w.moves.items():
                mine.moves[d] = max(pos, mine.moves.get(d, 0))
            # Kept whole (``apply_subtrees`` drops covered paths once, at the end).
            for mine_paths, theirs in ((mine.sweep_before, w.sweep_before),
                                       (mine.moved_from, w.moved_from)):
                for path, pos in theirs.items():
                    mine_paths[path] = max(pos, mine_paths.get(path, 0))
            if mine.first_move is None or (
                w.first_move is not None and w.first_move < mine.first_move
            ):
                mine.first_move = w.first_move
            mine.written.update(w.written)
        self.cursor = later.cursor
        self.version = later.version
        self.batches += later.batches
        return self


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _source_bytes(actions: list[dict[str, Any]]) -> int:
    """About how large the documents of ``actions`` are: the entries PostgreSQL rendered,
    256 bytes for a delete."""
    return sum(len(a.get(RENDERED) or b"") or 256 for a in actions)


def _outermost(tops: Iterable[Node]) -> list[Node]:
    """Subtree roots that are not inside another one (their rewrite covers them)."""
    kept: list[Node] = []
    for node in sorted(tops, key=lambda n: n.path):
        if not any(node.path.startswith(k.path.rstrip("/") + "/") for k in kept):
            kept.append(node)
    return kept


class Applier:
    """Applies batches for one consumer to the index behind ``alias``. Thread-safe
    (one batch per call; share it between partition runners and their lanes)."""

    def __init__(
        self,
        engine: Engine,
        es: SearchEngine,
        alias: str,
        on_reject: Any,
        *,
        chunk_size: int = 1000,
        stream_chunk: int = 1000,
    ) -> None:
        self.engine = engine
        self.es = es
        self.alias = alias
        self.on_reject = on_reject
        self.chunk_size = chunk_size
        self.stream_chunk = stream_chunk
        #: A conflict against a tombstone restores a node PostgreSQL still has: one
        #: deleted by hand in the index (``bulk.resolve_conflicts``).
        self.alive = partial(node_exists, engine)
        #: Node-lane batches streaming now (``_node_stream``).
        self._streams = 0
        self._streams_lock = threading.Lock()

    @staticmethod
    def _checker(stop: threading.Event | None) -> Callable[[], None]:
        started = time.monotonic()

        def check() -> None:
            if stop is not None and stop.is_set():
                raise Abandoned("shutting down")
            if time.monotonic() - started > MAX_BATCH_AGE:
                raise Abandoned("batch attempt older than MAX_BATCH_AGE")

        return check

    def apply(
        self, events: list[Event], version: int, stop: threading.Event | None = None
    ) -> BatchResult:
        """Apply ``events`` (one batch) whole, both parts in turn: the nodes at
        external version ``version`` (the position of its last event), then its
        subtrees and sweeps.

        Raises ``Abandoned`` if ``stop`` is set meanwhile, and lets errors of
        PostgreSQL or Elasticsearch through; either way nothing needs undoing, and
        the caller simply applies the batch again later.
        """
        started = time.monotonic()
        plan = plan_batch(events)
        stats = self.apply_nodes(plan, version, stop)
        work = SubtreeWork.from_plan(plan, after=0, cursor=version, version=version)
        if not work.empty:
            stats += self.apply_subtrees(work, stop)
        return BatchResult(
            len(events), version, stats, work.swept > 0, time.monotonic() - started
        )

    def apply_nodes(
        self, plan: BatchPlan, version: int, stop: threading.Event | None = None,
        timings: dict[str, float] | None = None,
    ) -> BulkStats:
        """The nodes the batch's events name, at ``version``, from one snapshot."""
        return self.send_nodes(self.read_nodes(plan, version, stop, timings), stop, timings)

    def read_nodes(
        self, plan: BatchPlan, version: int, stop: threading.Event | None = None,
        timings: dict[str, float] | None = None,
    ) -> NodeActions:
        """The first half of ``apply_nodes``: read the named nodes from one snapshot.

        A batch of at most ``ID_CHUNK`` nodes (the node lane's usual one) is read
        whole and the snapshot closed before anything is sent: the same documents, a
        shorter transaction, and the worker can read the next batch while this one's
        request is in flight. A larger one is left to ``send_nodes``, which streams it
        from a snapshot of its own (taken later still: the rule holds)."""
        if sum(len(p.nodes) for p in plan.namespaces.values()) > ID_CHUNK:
            return NodeActions(plan, version, None)
        check = self._checker(stop)
        t0 = time.monotonic()
        with self.engine.connect() as raw:
            if len(plan.namespaces) == 1:
                # One namespace of at most ID_CHUNK nodes is one statement: its own
                # snapshot is the one snapshot, taken after the batch was read, in
                # autocommit (no BEGIN and COMMIT round trips on a lone change's path).
                conn = raw.execution_options(isolation_level="AUTOCOMMIT")
                ready = list(self._node_actions(conn, plan, version, check))
            else:
                conn = raw.execution_options(isolation_level="REPEATABLE READ")
                with conn.begin():
                    ready = list(self._node_actions(conn, plan, version, check))
        if timings is not None:
            timings["read_nodes"] = time.monotonic() - t0
        return NodeActions(plan, version, ready)

    def send_nodes(
        self, nodes: NodeActions, stop: threading.Event | None = None,
        timings: dict[str, float] | None = None,
    ) -> BulkStats:
        """The second half of ``apply_nodes``: write what ``read_nodes`` read."""
        if timings is None:
            timings = {}
        t1 = time.monotonic()
        timings["sent_at"] = time.time()
        ready = nodes.actions
        if ready is None:
            check = self._checker(stop)
            with self.engine.connect() as raw, self._node_stream() as in_flight:
                conn = raw.execution_options(isolation_level="REPEATABLE READ")
                with conn.begin(), closing(
                    self._node_actions(conn, nodes.plan, nodes.version, check)
                ) as actions:
                    # An import's batch (tens of thousands of nodes): the next requests
                    # are read and encoded while Elasticsearch indexes two. All carry
                    # the batch's version, and this returns (the batch can be settled)
                    # only once every one of them was answered (``send_chunks``).
                    stats = send_stream(
                        self.es, actions, self.on_reject, chunk_size=self.chunk_size,
                        max_chunk_bytes=CHUNK_BYTES, in_flight=in_flight,
                        before_request=check, alive=self.alive, timings=timings,
                    )
        elif len(ready) <= self.chunk_size and _source_bytes(ready) <= CHUNK_BYTES // 2:
            stats = send_request(self.es, ready, self.on_reject, timings, alive=self.alive)
        else:  # large contents: chunks by size too
            stats = self._send(ready)
        timings["bulk"] = time.monotonic() - t1
        timings["acked_at"] = time.time()
        return stats

    def apply_subtrees(
        self,
        work: SubtreeWork,
        stop: threading.Event | None = None,
        *,
        chunk_size: int | None = None,
        yield_to: Callable[[], None] | None = None,
        in_flight: Callable[[], int] | None = None,
    ) -> BulkStats:
        """Rewrite the moved subtrees of ``work``, then (one refresh, one sweep)
        reconcile what may be left under stale paths, if anything can be. Call it only
        after the node part of every batch merged in was acknowledged: their writes
        are what let the subtree skip those nodes.

        ``yield_to`` is called before each bulk request of ``chunk_size`` actions and
        before the refresh: the worker uses it to let the node lane's small, latency-
        bound batches go first (``indexer.subtree_lane.SubtreeLane``); ``in_flight``,
        asked before each request, how many may be in flight (default
        ``bulk.IN_FLIGHT``)."""
        check = self._checker(stop)
        size = chunk_size or self.chunk_size
        pause = yield_to or (lambda: None)
        work.timings = {}
        t0 = time.monotonic()
        with self.engine.connect() as raw:
            conn = raw.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                # Closed here, whatever ends the sending, while the connection is open:
                # it closes the subtree's server-side cursor.
                with closing(self._subtree_actions(conn, work, check)) as actions:
                    stats = self._send_pass(actions, size, pause, check, in_flight,
                                            work.timings)
                t1 = t2 = time.monotonic()
                sweeps = self._sweeps(conn, work)
                if sweeps:
                    check()
                    pause()
                    # A search sees only refreshed writes: make the rewrites visible, so
                    # the sweep does not find (and rewrite again) their older copies,
                    # and the node part's writes, so it finds what they left stale.
                    self.es.refresh(self.alias)
                    t2 = time.monotonic()
                    stats += self._send(self._sweep_actions(conn, sweeps, work.version, check))
        t3 = time.monotonic()
        work.timings.update({"rewrite": t1 - t0, "refresh": t2 - t1, "sweep": t3 - t2})
        work.swept = sum(len(paths) for paths in sweeps.values())
        return stats

    @staticmethod
    def _sweeps(conn: Connection, work: SubtreeWork) -> dict[str, dict[str, int]]:
        """Per namespace, the paths to sweep (with their positions): the deleted ones
        always; the old paths of moved directories only if, in this snapshot, a node
        may have left a moved subtree since the first move (``may_have_left``).

        Why that is enough: every node in a moved directory's subtree in this
        snapshot was just rewritten, at a version at least its move's. A node that was
        in the subtree at the move but is not in it now left through an event after
        the move: a directory deleted or moved to another parent (or a type this code
        does not know). Only such a node can keep a document under the old path that
        nothing else rewrites: a file's own event rewrites or deletes it by id, and a
        deleted directory's sweep looks only under its path at the time. Without such
        an event, no refresh and no search."""
        sweeps: dict[str, dict[str, int]] = {}
        for ns, w in work.namespaces.items():
            moved_from = w.moved_from
            if moved_from and w.first_move is not None and not may_have_left(
                conn, ns, w.first_move
            ):
                moved_from = {}
            paths = all_sweeps(w.sweep_before, moved_from)
            if paths:
                sweeps[ns] = paths
        return sweeps

    def _send_pass(
        self, actions: Iterator[dict[str, Any]], chunk_size: int, pause: Callable[[], None],
        check: Callable[[], None], in_flight: Callable[[], int] | None,
        timings: dict[str, float],
    ) -> BulkStats:
        """A subtree pass's actions, read, built and encoded on a thread of their own
        (``prefetched``: the next requests are ready while these are in flight; that
        thread is the only user of the pass's connection until it has stopped), sent
        up to ``in_flight()`` requests at a time (``send_chunks`` says why their order
        does not matter), each after ``pause`` and ``check``."""

        def before_request() -> None:
            pause()  # between two bulk requests of this pass
            check()

        return send_stream(self.es, actions, self.on_reject, chunk_size=chunk_size,
                           max_chunk_bytes=PASS_CHUNK_BYTES, in_flight=in_flight or IN_FLIGHT,
                           before_request=before_request, alive=self.alive, timings=timings)

    @contextmanager
    def _node_stream(self) -> Iterator[Callable[[], int]]:
        """How many requests a node-lane batch streamed by ``send_nodes`` may keep in
        flight, asked before each: ``bulk.IN_FLIGHT`` shared by the batches streaming at
        once (the node lane keeps two batches in flight, and partitions share this
        applier): one such batch alone takes both of the server's write threads, two
        take one each, instead of four requests queueing in the server."""
        with self._streams_lock:
            self._streams += 1
        try:
            yield lambda: max(1, IN_FLIGHT // max(1, self._streams))
        finally:
            with self._streams_lock:
                self._streams -= 1

    def _send(self, actions: Iterable[dict[str, Any]], chunk_size: int | None = None) -> BulkStats:
        def reject(r: Rejected) -> None:
            self.on_reject(r)

        return send(self.es, actions, reject, chunk_size=chunk_size or self.chunk_size,
                    alive=self.alive)

    def _write_or_delete(
        self, conn: Connection, ns: str, ids: list[str], version: int
    ) -> Iterator[dict[str, Any]]:
        """Each of ``ids`` written from its current row at ``version`` (its entry
        rendered by PostgreSQL), or deleted if PostgreSQL no longer has it."""
        found = fetch_entries(conn, self.alias, ns, ids, version)
        for node_id in ids:
            if node_id not in found:
                yield delete_action(self.alias, ns, node_id, version)
                continue
            entry = found[node_id]
            if entry is not None:  # None: a namespace root, not indexed
                yield rendered_action(self.alias, ns, node_id, version, entry)

    def _node_actions(
        self, conn: Connection, plan: BatchPlan, version: int, check: Callable[[], None]
    ) -> Generator[dict[str, Any], None, None]:
        for ns, p in plan.namespaces.items():
            for ids in _chunks(sorted(p.nodes), ID_CHUNK):
                check()
                yield from self._write_or_delete(conn, ns, ids, version)

    def _subtree_actions(
        self, conn: Connection, work: SubtreeWork, check: Callable[[], None],
    ) -> Generator[dict[str, Any], None, None]:
        for ns, w in work.namespaces.items():
            if not w.moves:
                continue
            tops = fetch_nodes(conn, ns, sorted(w.moves))  # gone ones: covered by sweeps
            for top in _outermost(tops.values()):
                with closing(stream_subtree_entries(
                    conn, self.alias, top, w.moves[top.id], w.moves, self.stream_chunk
                )) as stream:
                    for i, (node_id, version, entry) in enumerate(stream):
                        if i % self.stream_chunk == 0:
                            check()
                        if entry is not None and w.written.get(node_id, 0) < version:
                            yield rendered_action(self.alias, ns, node_id, version, entry)

    def _sweep_actions(
        self, conn: Connection, sweeps: dict[str, dict[str, int]], version: int,
        check: Callable[[], None],
    ) -> Iterator[dict[str, Any]]:
        for ns, sweep_before in sweeps.items():
            paths = sorted(sweep_before.items())
            for start in range(0, len(paths), SWEEP_CLAUSES):
                for ids in self._stale_docs(ns, dict(paths[start : start + SWEEP_CLAUSES])):
                    check()
                    yield from self._write_or_delete(conn, ns, ids, version)

    def _stale_docs(self, ns: str, sweep_before: dict[str, int]) -> Iterator[list[str]]:
        """Ids of documents of ``ns`` under any of the paths with ``seq`` below the
        highest of their positions, a page at a time (search_after on the unique
        node_id: stable while we rewrite them). One search for all the paths: one
        ``terms`` filter and one range, not a clause per path (hundreds of moves merge
        into one pass; a clause each made the search itself the slow part on
        noida-db). Using the highest position for every path can only add documents
        that were already written from a state holding the event (reconciled again
        from PostgreSQL: harmless); it never leaves a stale one out."""
        query = stale_under_query(ns, sweep_before, max(sweep_before.values()))
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {
                "query": query, "sort": [{"node_id": "asc"}], "size": SWEEP_PAGE,
                "_source": False, "track_total_hits": False,
            }
            if after is not None:
                body["search_after"] = after
            resp = self.es.search(self.alias, body, routing=ns)
            hits = resp["hits"]["hits"]
            if not hits:
                return
            yield [str(h["_id"]) for h in hits]
            if len(hits) < SWEEP_PAGE:
                return
            after = hits[-1]["sort"]
