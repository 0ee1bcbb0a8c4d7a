"""Rebuild the search index with no downtime: ``replay`` (from the event log) and
``reindex`` (from a snapshot of ``nodes``), both then catching up on the event tail.

The procedure (``rebuild``), for alias A (e.g. ``pathkeeper-nodes``):

1. take the replay lease for A (a session advisory lock in PostgreSQL; a second
   replay/reindex of A is refused), and delete the half-built indices an earlier,
   killed run left behind (they carry the marker alias ``A-building``; since we
   hold the lease, no living process is building them);
2. pick a bound V0: a safe position of the log (every event <= V0 is committed,
   see ``coordinator.event_reader``), or ``--until``;
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

This module is the procedure; its parts are ``indexer.replay_lease`` (step 1's lease),
``indexer.log_scan`` (safe positions, step 2), ``indexer.replay_sources`` (step 3),
``indexer.replay_loader`` (steps 1's cleanup and 4) and ``indexer.replay_tail``
(steps 5 and 7).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from coordinator import Coordinator
from coordinator.indexing import consumer_for
from coordinator.shard_map import DEFAULT_SHARD

from . import checkpoints, contract, elasticsearch_index
from .bulk import Rejected
from .contract import (
    IndexShape,
    building_marker,
    delete_action,
)
from .errors import ReplayError
from .live_nodes import node_exists
from .log_scan import current_bound
from .prefetch import prefetched
from .progress import Progress
from .replay_lease import ReplayLease
from .replay_loader import (
    BULK_CHUNK,
    bulk_index,
    cleanup_abandoned,
    create_building_index,
    record_left_out,
)
from .replay_sources import state_actions, state_count
from .replay_tail import catch_up, worker_batch_apply
from .search_engine import SearchEngine

log = logging.getLogger("pathkeeper.replay")


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
    shape: IndexShape | None = None,
) -> RebuildResult:
    """Build a new concrete index for ``alias`` from the log (``source="events"``) or
    a snapshot of ``nodes`` (``source="snapshot"``), catch up and swap it in. The new
    index is of ``shape`` (default: the live index's, else the default shape).

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
    if until is None and not dry_run:
        return build_and_swap([(DEFAULT_SHARD, coord)], es, source=source, alias=alias,
                              keep_old=keep_old, progress=progress, after_load=after_load,
                              consumer=consumer, shape=shape).result
    progress = progress or Progress(enabled=False)
    started = time.monotonic()
    engine = coord.engine
    with ReplayLease(engine, alias), ExitStack() as stack:
        bound = current_bound(engine)
        v0 = bound if until is None else min(until, bound)
        if until is not None and until > bound:
            progress.note(f"--until {until} is past the safe end of the log; using {bound}")
        result = RebuildResult(source, alias, None, v0, v0, dry_run=dry_run)
        if dry_run:
            result.documents = state_count(source, engine, v0, namespaces, progress)
            result.seconds = time.monotonic() - started
            progress.count("documents", result.documents)
            return result
        actions = state_actions(stack, source, engine, v0, namespaces, progress)
        assert until is not None
        # Named before the cleanup, so a new index never reuses a deleted one's name.
        name = elasticsearch_index.next_index_name(es, alias)
        result.cleaned_up = cleanup_abandoned(es, alias)
        shape = shape or elasticsearch_index.live_shape(es, alias)
        index = create_building_index(es, alias, name, shape)
        result.index = index
        progress.note(f"building {index} as of position {v0} (from {source})")
        result.documents = _load(es, actions(index), progress, result.too_large)
        elasticsearch_index.finish_loading(es, index, shape.replicas)
        if after_load is not None:
            after_load(index)
        # An audit index: complete, never swapped in, not cleaned up.
        elasticsearch_index.unmark_building(es, alias, index)
        result.seconds = time.monotonic() - started
        return result


@dataclass
class ShardsRebuildResult:
    """What a rebuild over several shards did; ``positions`` / ``final_positions``:
    each shard's V0 and the position its tail reached (its checkpoints moved there)."""

    result: RebuildResult
    positions: dict[str, int] = field(default_factory=dict)
    final_positions: dict[str, int] = field(default_factory=dict)


def build_and_swap(
    shards: Sequence[tuple[str, Coordinator]],
    es: SearchEngine,
    *,
    source: str = "events",
    alias: str = contract.DEFAULT_ALIAS,
    keep_old: bool = False,
    progress: Progress | None = None,
    after_load: Callable[[str], None] | None = None,
    consumer: str | None = None,
    shape: IndexShape | None = None,
) -> ShardsRebuildResult:
    """One new index for ``alias`` from every shard's log (``source="events"``) or
    snapshot (``"snapshot"``), each shard's state as of its own bound V0 (its documents
    carry versions of its own log, as its worker writes them); each shard's tail caught
    up into it, the alias swapped once, each shard's tail caught up again on the live
    alias, and each shard's checkpoints of the live consumer moved to the position its
    tail reached. Positions of two shards are never compared. One server is one shard."""
    if source not in ("events", "snapshot"):
        raise ValueError(f"unknown source {source!r}")
    progress = progress or Progress(enabled=False)
    started = time.monotonic()
    consumer = consumer or consumer_for(alias)
    several = len(shards) > 1
    with ExitStack() as stack:
        # Every shard's lease, in the shards' order: no rebuild of this alias on any of
        # them (over all shards, or one server's) runs meanwhile.
        for _, coord in shards:
            stack.enter_context(ReplayLease(coord.engine, alias))
        out = ShardsRebuildResult(RebuildResult(source, alias, None, 0, 0))
        result = out.result
        # Named before the cleanup, so a new index never reuses a deleted one's name.
        name = elasticsearch_index.next_index_name(es, alias)
        result.cleaned_up = cleanup_abandoned(es, alias)
        shape = shape or elasticsearch_index.live_shape(es, alias)
        index = create_building_index(es, alias, name, shape)
        result.index = index
        for shard, coord in shards:
            v0 = current_bound(coord.engine)
            out.positions[shard] = v0
            actions = state_actions(stack, source, coord.engine, v0, None, progress)
            progress.note(f"loading shard {shard} into {index} as of its position {v0} "
                          f"(from {source})" if several else
                          f"building {index} as of position {v0} (from {source})")
            result.documents += _load(es, actions(index), progress, result.too_large)
        elasticsearch_index.finish_loading(es, index, shape.replicas)
        if after_load is not None:
            after_load(index)
        rejected: list[Rejected] = []
        cursors: dict[str, int] = {}
        progress.phase("catch up", unit="events")
        for shard, coord in shards:
            building = worker_batch_apply(coord.engine, es, building_marker(alias), rejected)
            cursors[shard], n = catch_up(coord, out.positions[shard], building, progress)
            result.tail_events += n
        es.refresh(index)
        # The atomic swap: one request moves the alias and drops the building marker.
        old = elasticsearch_index.switch_alias(es, alias, index, built=True)
        result.swapped, result.old_indices = True, old
        progress.note(f"alias {alias} now points to {index} (was {', '.join(old) or 'nothing'})")
        for shard, coord in shards:
            # Events each shard's live worker applied to the old index just before the swap.
            live = worker_batch_apply(coord.engine, es, alias, rejected)
            cursor, n = catch_up(coord, cursors[shard], live, progress,
                                 until=current_bound(coord.engine))
            result.tail_events += n
            out.final_positions[shard] = cursor
            result.checkpoints_moved += checkpoints.advance_all(coord.engine, consumer, cursor)
        result.too_large += [r for r in rejected if r.too_large]
        result.rejected = len(rejected)
        for r in rejected:
            if not r.too_large:
                log.error("document rejected during the tail: %s", r)
        for _, coord in shards:
            # Dead letters of the live consumer on the shard of each document's namespace.
            mine = set(coord.namespaces()) if several and result.too_large else set()
            record_left_out(coord.engine, consumer,
                            [r for r in result.too_large if not several or r.namespace in mine])
        if not several:
            result.position = out.positions[shards[0][0]]
            result.final_position = out.final_positions[shards[0][0]]
        if not keep_old:
            for i in old:
                es.delete_index(i)
                result.deleted.append(i)
        result.seconds = time.monotonic() - started
        return out


def _load(es: SearchEngine, actions: Iterator[dict[str, Any]], progress: Progress,
          too_large: list[Rejected]) -> int:
    """Bulk-load ``actions`` (a rebuild's index actions); how many were written."""
    progress.phase("load documents", unit="documents")
    docs = prefetched(actions, BULK_CHUNK)
    try:
        loaded, _ = bulk_index(es, docs, progress, too_large=too_large)
    finally:
        docs.close()  # the prefetching thread is done with the fold before it closes
    return loaded


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
        if dry_run:
            result.documents = state_count(source, engine, v0, wanted, progress)
            result.seconds = time.monotonic() - started
            return result
        actions = state_actions(stack, source, engine, v0, wanted, progress)
        targets = elasticsearch_index.alias_targets(es, alias)
        if not targets:
            raise ReplayError(f"alias {alias!r} does not exist: run a full replay")
        index = targets[-1]
        result.index = index
        progress.phase("rewrite documents", unit="documents")
        # The ids that exist at V0, to find the extras afterwards: the one structure
        # that grows with the namespace (an id and a set slot, ~100 bytes each).
        kept: dict[str, set[str]] = {ns: set() for ns in wanted}

        def written() -> Iterator[dict[str, Any]]:
            for action in actions(index):
                kept[str(action["routing"])].add(str(action["_id"]))
                yield action

        # Conflicts judged as the worker judges them: a document edited or deleted by
        # hand is rewritten, one the live worker wrote after V0 stays.
        alive = partial(node_exists, engine)
        result.documents, _ = bulk_index(es, written(), progress, alive=alive,
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


