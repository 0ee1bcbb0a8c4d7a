"""The pure part: what a batch of events asks the worker to look at."""

from __future__ import annotations

from datetime import UTC, datetime

from coordinator import Event
from coordinator.events import (
    Created,
    Deleted,
    DomainEvent,
    Moved,
    NamespaceCreated,
    NamespaceDropped,
    Written,
)
from coordinator.results import POSITION_BLOCK
from indexer.plan import cut_after_subtree_move, minimal_sweeps, moves_subtree, plan_batch


def ev(position: int, change: DomainEvent, ns: str = "n") -> Event:
    return Event.of(position, ns, change, datetime.now(UTC))


def created(node: str, kind: str = "file") -> Created:
    return Created(id=node, parent_id="root", name=node, kind=kind, path=f"/{node}",
                   content=None, metadata={}, version=1)


def moved(node: str, kind: str, old_path: str, path: str) -> Moved:
    return Moved(id=node, kind=kind, old_parent_id="root", old_name=old_path.split("/")[-1],
                 old_path=old_path, parent_id="root", name=path.split("/")[-1], path=path,
                 version=2)


def deleted(node: str, kind: str, path: str, count: int) -> Deleted:
    return Deleted(id=node, kind=kind, path=path, recursive=True, count=count, version=1)


def written(node: str) -> Written:
    return Written(id=node, path=f"/{node}", content="x", metadata={}, version=2)


B = POSITION_BLOCK


def test_plan_collects_nodes_subtrees_and_sweeps() -> None:
    plan = plan_batch([
        ev(B, NamespaceCreated(root_id="root")),
        ev(2 * B, created("f1")),
        ev(3 * B, moved("d1", "dir", "/a", "/b")),
        ev(3 * B + 1, moved("d2", "dir", "/a/x", "/b/x")),
        ev(4 * B, deleted("d3", "dir", "/c", 5)),
        ev(5 * B, deleted("d4", "dir", "/e", 1)),
        ev(6 * B, moved("f2", "file", "/f", "/g")),
        ev(7 * B, NamespaceDropped(root_id="root2", count=3), ns="gone"),
    ])
    n = plan.namespaces["n"]
    assert n.nodes == {"f1", "d1", "d2", "d3", "d4", "f2"}
    assert n.subtrees == {"d1", "d2"}
    assert n.sweeps == {"/a", "/c"}  # /a/x is inside /a; an empty dir needs no sweep
    assert n.sweep_before == {"/c": 4 * B}  # always swept
    assert n.moved_from == {"/a": 3 * B + 1}  # swept if a node left a moved subtree
    assert n.first_move == 3 * B  # ... since the first move
    assert plan.namespaces["gone"].sweeps == {"/"}
    assert plan.namespaces["gone"].nodes == set()


def test_an_event_the_indexer_cannot_read_rewrites_its_node() -> None:
    """A newer writer's event (unknown type or payload version) must not stop the indexer:
    its node is rewritten from its current row, and nothing else is assumed."""
    now = datetime.now(UTC)
    newer = [
        Event(B, "n", "touched", "t1", {"id": "t1"}, now),
        Event(B + 1, "n", "moved", "m1", {**ev(0, moved("m1", "dir", "/a", "/b")).payload,
                                          "v": 99}, now),
    ]
    plan = plan_batch(newer)
    assert plan.namespaces["n"].nodes == {"t1", "m1"}
    assert not plan.has_subtree_work
    assert not any(moves_subtree(e) for e in newer)


def test_batch_ends_after_the_first_transaction_touching_a_subtree() -> None:
    events = [
        ev(B, created("f1")),
        ev(2 * B, moved("d1", "dir", "/a", "/b")),
        ev(2 * B + 1, written("f1")),
        ev(3 * B, created("f2")),
    ]
    cut, cursor = cut_after_subtree_move(events, 9 * B)
    assert [e.position for e in cut] == [B, 2 * B, 2 * B + 1]
    assert cursor == 3 * B - 1  # the end of the moving transaction's block
    # Nothing after it: the batch and its cursor stay as they are.
    assert cut_after_subtree_move(events[:3], 9 * B) == (events[:3], 9 * B)
    assert cut_after_subtree_move(events[2:], 9 * B) == (events[2:], 9 * B)


def test_minimal_sweeps_keeps_the_covering_paths_with_the_highest_position() -> None:
    # "/a-b" sorts between "/a" and "/a/b" but is not inside "/a".
    assert minimal_sweeps(
        {"/a/b": 5, "/a-b/c": 3, "/a": 1, "/a-b": 2, "/c/d/e/f": 9, "/c/d": 4}
    ) == {"/a": 5, "/a-b": 3, "/c/d": 9}
    assert minimal_sweeps({"/a/b": 1, "/x": 7, "/": 2}) == {"/": 7}


def test_events_that_only_name_their_node_are_not_decoded() -> None:
    """A created, written or metadata_set event asks for nothing but its node's rewrite
    (from its current row): its payload is never read into an event object, the per-event
    cost of an import's or a create load's batch."""
    events = [ev(B, created("f1")), ev(B + 1, written("f1")), ev(2 * B, created("f2"))]
    plan = plan_batch(events)
    assert plan.namespaces["n"].nodes == {"f1", "f2"}
    assert all("change" not in e.__dict__ for e in events)  # the decoded event is cached
