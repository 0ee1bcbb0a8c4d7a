"""What a batch of events asks the indexer to look at: pure, no I/O.

Events say WHAT changed; PostgreSQL says what it IS now. So a batch only
collects, per namespace:

* ``nodes``: node ids whose own document must be rewritten from their current
  row (or deleted if the row is gone): every created, written, moved and deleted
  node;
* ``subtrees``: directories moved (renamed or re-parented) whose whole current
  subtree must be rewritten, because every descendant's ``path`` changed;
* ``sweeps``: paths under which Elasticsearch may still hold documents of nodes
  that no longer exist, or no longer live there: the path of a recursively
  deleted directory, the old path of a moved directory (a subtree moved and then
  deleted in the same batch has no rows left to rewrite, and its documents still
  carry the old path), and "/" for a dropped namespace. The worker searches
  these, after writing the rest of the batch, for documents older than the batch
  and reconciles each with PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from coordinator import Event
from coordinator.eventlog import block_end


@dataclass
class NamespacePlan:
    nodes: set[str] = field(default_factory=set)
    subtrees: set[str] = field(default_factory=set)
    sweeps: set[str] = field(default_factory=set)


@dataclass
class BatchPlan:
    namespaces: dict[str, NamespacePlan] = field(default_factory=dict)

    def of(self, namespace: str) -> NamespacePlan:
        return self.namespaces.setdefault(namespace, NamespacePlan())

    @property
    def needs_sweep(self) -> bool:
        return any(p.sweeps for p in self.namespaces.values())


def _minimal_prefixes(paths: set[str]) -> set[str]:
    """Drop paths already covered by a shorter one (``/a`` covers ``/a/b``)."""
    if "/" in paths:
        return {"/"}
    kept: set[str] = set()
    for p in sorted(paths):
        if not any(p == k or p.startswith(k + "/") for k in kept):
            kept.add(p)
    return kept


def plan_batch(events: Iterable[Event]) -> BatchPlan:
    """The work a batch implies (see module docstring)."""
    plan = BatchPlan()
    for ev in events:
        p = ev.payload
        if ev.type == "namespace_created":
            continue  # the root is not indexed
        ns = plan.of(ev.namespace)
        if ev.type == "namespace_dropped":
            ns.sweeps.add("/")
            continue
        node_id = ev.node_id or p.get("id")
        if node_id is None:
            continue
        ns.nodes.add(str(node_id))
        if ev.type == "moved" and p.get("kind") == "dir":
            ns.subtrees.add(str(node_id))
            if p.get("old_path"):
                ns.sweeps.add(str(p["old_path"]))
        elif (
            ev.type == "deleted" and p.get("kind") == "dir" and p.get("recursive")
            and int(p.get("count", 2)) > 1
        ):
            ns.sweeps.add(str(p["path"]))
    for ns in plan.namespaces.values():
        ns.sweeps = _minimal_prefixes(ns.sweeps)
    return plan


def moves_subtree(ev: Event) -> bool:
    """A directory move: its application rewrites a whole subtree."""
    return ev.type == "moved" and ev.payload.get("kind") == "dir"


def cut_after_subtree_move(events: list[Event], cursor: int) -> tuple[list[Event], int]:
    """End the batch with the first transaction that moves a directory.

    Returns the events to apply now and the cursor that goes with them. A
    transaction's events share one block of positions and no other transaction
    uses that block, so every event up to the end of the block is in the batch:
    the shorter cursor is just as safe. This keeps a big rename in a batch of its
    own, with the same events (and so the same version) however often it is read
    again: a worker restarted in its middle finds the documents it already wrote
    answered by 409 (cheap) instead of rewriting them all. (Recursive deletes need
    no such care: a restarted sweep finds only the documents not yet deleted.)
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
