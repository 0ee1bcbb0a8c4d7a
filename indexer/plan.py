"""What a batch of events asks the indexer to look at: pure, no I/O.

Events say WHAT changed; PostgreSQL says what it IS now. So a batch only
collects, per namespace:

* ``nodes``: node ids whose own document must be rewritten from their current
  row (or deleted if the row is gone): every created, written, moved and deleted
  node. Cheap (one document each): the worker's *node lane* writes them at once.
* ``moves``: directories moved (renamed or re-parented), each with the position
  of its last move in the batch, whose whole current subtree must be rewritten
  because every descendant's ``path`` changed (``subtrees`` is their id set);
* ``sweeps``: paths under which Elasticsearch may still hold documents of nodes
  that no longer exist, or no longer live there, each with the position of the
  event that made them stale. ``sweep_before``: the path of a recursively deleted
  directory, and "/" for a dropped namespace; always swept. ``moved_from``: the
  old path of a moved directory; swept only when a node may have left the moved
  subtree since the move (``first_move``; see ``indexer.applier``): a subtree moved
  and then deleted, or a directory moved out of it and then deleted, has no rows
  left under the new path, and its documents still carry the old one. A document
  found there with ``seq`` below that position was written from a state older than
  the event, so it is reconciled with PostgreSQL; one at or above it was written
  from a snapshot that already held the event, and is left alone. (That test
  depends only on the event, not on where a batch happened to end: a restarted or
  merged batch sweeps exactly the same documents.)

Subtrees and sweeps are the expensive part (a refresh and a search, and up to a
whole subtree of writes): the worker's *subtree lane* does them, merged across
batches (``SubtreeWork``), so a directory move no longer costs a batch of its
own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import assert_never

from coordinator import Event
from coordinator.errors import InvalidEvent
from coordinator.events import (
    Created,
    Deleted,
    MetadataSet,
    Moved,
    NamespaceCreated,
    NamespaceDropped,
    Written,
)
from coordinator.results import block_end


@dataclass
class NamespacePlan:
    nodes: set[str] = field(default_factory=set)
    #: moved directory id -> position of its last move in the batch.
    moves: dict[str, int] = field(default_factory=dict)
    #: swept path -> position of the (last) delete or drop that made documents under it
    #: stale.
    sweep_before: dict[str, int] = field(default_factory=dict)
    #: old path of a moved directory -> position of its (last) move from there.
    moved_from: dict[str, int] = field(default_factory=dict)
    #: position of the first directory move (None: no move).
    first_move: int | None = None

    @property
    def subtrees(self) -> set[str]:
        return set(self.moves)

    @property
    def sweeps(self) -> set[str]:
        """Every path the batch may sweep (``moved_from`` only if a node left)."""
        return set(all_sweeps(self.sweep_before, self.moved_from))


@dataclass
class BatchPlan:
    namespaces: dict[str, NamespacePlan] = field(default_factory=dict)

    def of(self, namespace: str) -> NamespacePlan:
        return self.namespaces.setdefault(namespace, NamespacePlan())

    @property
    def has_subtree_work(self) -> bool:
        return any(p.moves or p.sweep_before for p in self.namespaces.values())


def minimal_sweeps(sweeps: dict[str, int]) -> dict[str, int]:
    """Drop paths covered by a shorter one (``/a`` covers ``/a/b``); the covering path
    keeps the highest position of those it covers. Searching ``/a`` for ``seq < p``
    with a larger ``p`` than ``/a`` itself needed only adds documents to reconcile
    (rewritten from PostgreSQL as they are: harmless), never leaves one out."""
    if "/" in sweeps:
        return {"/": max(sweeps.values())}
    kept: dict[str, int] = {}
    # Shallowest first, so a path's cover is kept before it; then a lookup of each of its
    # ancestors (a merged pass can carry thousands of paths: no pairwise comparison).
    for p in sorted(sweeps, key=lambda path: path.count("/")):
        names = p.split("/")
        cover = next((a for a in ("/".join(names[:i]) for i in range(2, len(names) + 1))
                      if a in kept), None)
        if cover is None:
            kept[p] = sweeps[p]
        else:
            kept[cover] = max(kept[cover], sweeps[p])
    return kept


def all_sweeps(sweep_before: dict[str, int], moved_from: dict[str, int]) -> dict[str, int]:
    """Both kinds of sweep as one (``minimal_sweeps``), a path keeping its highest
    position."""
    merged = dict(sweep_before)
    for path, pos in moved_from.items():
        merged[path] = max(pos, merged.get(path, 0))
    return minimal_sweeps(merged)


#: Event types whose only work is their node's rewrite from its current row: planned
#: from the stored type and node id alone, the payload never decoded (whatever it holds,
#: even a version this code cannot read, the node's rewrite is all it asks: the same
#: as for an unreadable event below). Most events of an import or a create load: the
#: worker's read does not even fetch their payloads (``read_events(bare_types=...)``).
PAYLOAD_FREE_TYPES = frozenset({Created.TYPE, Written.TYPE, MetadataSet.TYPE})


def plan_batch(events: Iterable[Event]) -> BatchPlan:
    """The work a batch implies (see module docstring)."""
    plan = BatchPlan()
    for ev in events:
        if ev.type in PAYLOAD_FREE_TYPES and ev.node_id is not None:
            plan.of(ev.namespace).nodes.add(ev.node_id)
            continue
        try:
            change = ev.change
        except InvalidEvent:
            # An event this indexer cannot read (a newer writer's type or version) still
            # names its node: rewriting that from its current row is right whatever the
            # event did to it.
            if ev.node_id is not None:
                plan.of(ev.namespace).nodes.add(ev.node_id)
            continue
        sweep: str | None = None
        moved_from: str | None = None
        match change:
            case NamespaceCreated():
                continue  # the root is not indexed
            case NamespaceDropped():
                plan.of(ev.namespace).sweep_before["/"] = ev.position
                continue
            case Moved(kind="dir"):
                ns_plan = plan.of(ev.namespace)
                ns_plan.moves[change.id] = ev.position  # in position order
                if ns_plan.first_move is None:
                    ns_plan.first_move = ev.position
                moved_from = change.old_path
            case Deleted(kind="dir", recursive=True) if change.count > 1:
                sweep = change.path
            case Created() | Written() | MetadataSet() | Moved() | Deleted():
                pass
            case _:
                assert_never(change)
        ns = plan.of(ev.namespace)
        ns.nodes.add(change.id)
        if sweep is not None:
            ns.sweep_before[sweep] = ev.position
        if moved_from is not None:
            ns.moved_from[moved_from] = ev.position
    for ns in plan.namespaces.values():
        ns.sweep_before = minimal_sweeps(ns.sweep_before)
        ns.moved_from = minimal_sweeps(ns.moved_from)
    return plan


def moves_subtree(ev: Event) -> bool:
    """A directory move: its application rewrites a whole subtree."""
    try:
        change = ev.change
    except InvalidEvent:
        return False  # its node is rewritten alone (see ``plan_batch``)
    return isinstance(change, Moved) and change.kind == "dir"


def cut_after_subtree_move(events: list[Event], cursor: int) -> tuple[list[Event], int]:
    """End the batch with the first transaction that moves a directory.

    No longer used by the worker (it was how the worker kept a big rename
    restartable, at the price of one batch, refresh and sweep per directory move;
    subtree documents are now written at the position of their move instead, see
    ``indexer.applier``). Kept for callers that want one move per batch.

    Returns the events to apply now and the cursor that goes with them. A
    transaction's events share one block of positions and no other transaction
    uses that block, so every event up to the end of the block is in the batch:
    the shorter cursor is just as safe.
    """
    for i, ev in enumerate(events):
        if moves_subtree(ev):
            end = block_end(ev.position)
            j = i
            while j + 1 < len(events) and events[j + 1].position <= end:
                j += 1
            if j + 1 < len(events):
                return events[: j + 1], min(cursor, end)
            break
    return events, cursor
