"""``replay`` / ``reindex`` over several shards into ONE new index, then one alias swap
(docs/sharding.md, section 2). The steps are ``indexer.replay.rebuild``'s, run per shard
where they read a log: each shard's state (its fold, or its snapshot of ``nodes``) is
loaded as of that shard's own bound V0 (its documents carry versions of its own log, as
its worker writes them), each shard's tail is caught up into the building index, the
alias is swapped once, each shard's tail is caught up again on the live alias, and each
shard's checkpoints of the live consumer move to the position its tail reached. Positions
of two shards are never compared.

``replay --until P`` is a position of one shard's log: over several shards it needs the
shard named (``shard_for_until``), and builds that shard's audit index with
``rebuild``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field

from coordinator import Coordinator
from coordinator.indexing import consumer_for

from . import checkpoints, contract, elasticsearch_index
from .bulk import Rejected
from .contract import IndexShape, building_marker, index_action
from .errors import ReplayError
from .log_scan import current_bound
from .prefetch import prefetched
from .progress import Progress
from .replay import RebuildResult
from .replay_lease import ReplayLease
from .replay_loader import (
    BULK_CHUNK,
    bulk_index,
    cleanup_abandoned,
    create_building_index,
    record_left_out,
)
from .replay_sources import state_nodes
from .replay_tail import catch_up, worker_batch_apply
from .search_engine import SearchEngine


class UntilNeedsShard(ReplayError):
    """``--until`` over several shards without naming the shard whose log it is in."""


def shard_for_until(names: Sequence[str], shard: str | None) -> str:
    """The shard a ``replay --until`` reads: the one named, or the only one."""
    if shard is not None:
        if shard not in names:
            raise ReplayError(f"no shard {shard}: the shards are {', '.join(names)}")
        return shard
    if len(names) != 1:
        raise UntilNeedsShard(
            "--until is a position of one shard's event log: name the shard with --shard "
            f"(one of {', '.join(names)})")
    return names[0]


@dataclass
class ShardsRebuildResult:
    """What a rebuild over several shards did; ``positions`` / ``final_positions``:
    each shard's V0 and the position its tail reached (its checkpoints moved there)."""

    result: RebuildResult
    positions: dict[str, int] = field(default_factory=dict)
    final_positions: dict[str, int] = field(default_factory=dict)


def rebuild_shards(
    shards: Sequence[tuple[str, Coordinator]],
    es: SearchEngine,
    *,
    source: str = "events",
    alias: str = contract.DEFAULT_ALIAS,
    keep_old: bool = False,
    progress: Progress | None = None,
    consumer: str | None = None,
    shape: IndexShape | None = None,
) -> ShardsRebuildResult:
    """Build one new index for ``alias`` from every shard's log (``source="events"``) or
    snapshot (``"snapshot"``), catch each shard up, swap the alias once."""
    if source not in ("events", "snapshot"):
        raise ValueError(f"unknown source {source!r}")
    progress = progress or Progress(enabled=False)
    started = time.monotonic()
    consumer = consumer or consumer_for(alias)
    with ExitStack() as stack:
        # Every shard's lease, in the shards' order: no rebuild of this alias on any
        # of them (over all shards, or one server's) runs meanwhile.
        for _, coord in shards:
            stack.enter_context(ReplayLease(coord.engine, alias))
        out = ShardsRebuildResult(RebuildResult(source, alias, None, 0, 0))
        result = out.result
        name = elasticsearch_index.next_index_name(es, alias)
        result.cleaned_up = cleanup_abandoned(es, alias)
        shape = shape or elasticsearch_index.live_shape(es, alias)
        index = create_building_index(es, alias, name, shape)
        result.index = index
        for shard, coord in shards:
            v0 = current_bound(coord.engine)
            out.positions[shard] = v0
            nodes = state_nodes(stack, source, coord.engine, v0, None, progress)
            progress.note(f"loading shard {shard} into {index} as of its position {v0} "
                          f"(from {source})")
            progress.phase(f"load documents of shard {shard}", unit="documents")
            docs = prefetched((index_action(index, n, v0) for n in nodes), BULK_CHUNK)
            try:
                loaded, _ = bulk_index(es, docs, progress, too_large=result.too_large)
            finally:
                docs.close()
            result.documents += loaded
        elasticsearch_index.finish_loading(es, index, shape.replicas)
        rejected: list[Rejected] = []
        cursors: dict[str, int] = {}
        progress.phase("catch up", unit="events")
        for shard, coord in shards:
            building = worker_batch_apply(coord.engine, es, building_marker(alias), rejected)
            cursors[shard], n = catch_up(coord, out.positions[shard], building, progress)
            result.tail_events += n
        es.refresh(index)
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
        for _, coord in shards:
            # Dead letters of the live consumer on the shard of each document's namespace.
            mine = set(coord.namespaces()) if result.too_large else set()
            record_left_out(coord.engine, consumer,
                            [r for r in result.too_large if r.namespace in mine])
        if not keep_old:
            for i in old:
                es.delete_index(i)
                result.deleted.append(i)
        result.seconds = time.monotonic() - started
        return out
