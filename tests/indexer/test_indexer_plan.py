"""The pure part: what a batch of events asks the worker to look at."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from coordinator import Event
from coordinator.models import POSITION_BLOCK
from indexer.plan import cut_after_subtree_move, plan_batch


def ev(position: int, type_: str, node: str | None = None, ns: str = "n", **payload: Any) -> Event:
    return Event(position, ns, type_, node, payload, datetime.now(UTC))


B = POSITION_BLOCK


def test_plan_collects_nodes_subtrees_and_sweeps() -> None:
    plan = plan_batch([
        ev(B, "namespace_created", "root"),
        ev(2 * B, "created", "f1", kind="file"),
        ev(3 * B, "moved", "d1", kind="dir", old_path="/a", path="/b"),
        ev(3 * B + 1, "moved", "d2", kind="dir", old_path="/a/x", path="/b/x"),
        ev(4 * B, "deleted", "d3", kind="dir", path="/c", recursive=True, count=5),
        ev(5 * B, "deleted", "d4", kind="dir", path="/e", recursive=True, count=1),
        ev(6 * B, "moved", "f2", kind="file", old_path="/f", path="/g"),
        ev(7 * B, "namespace_dropped", "root2", ns="gone", count=3),
    ])
    n = plan.namespaces["n"]
    assert n.nodes == {"f1", "d1", "d2", "d3", "d4", "f2"}
    assert n.subtrees == {"d1", "d2"}
    assert n.sweeps == {"/a", "/c"}  # /a/x is inside /a; an empty dir needs no sweep
    assert plan.namespaces["gone"].sweeps == {"/"}
    assert plan.namespaces["gone"].nodes == set()
    assert plan.needs_sweep


def test_batch_ends_after_the_first_transaction_touching_a_subtree() -> None:
    events = [
        ev(B, "created", "f1", kind="file"),
        ev(2 * B, "moved", "d1", kind="dir", old_path="/a", path="/b"),
        ev(2 * B + 1, "written", "f1"),
        ev(3 * B, "created", "f2", kind="file"),
    ]
    cut, cursor = cut_after_subtree_move(events, 9 * B)
    assert [e.position for e in cut] == [B, 2 * B, 2 * B + 1]
    assert cursor == 3 * B - 1  # the end of the moving transaction's block
    # Nothing after it: the batch and its cursor stay as they are.
    assert cut_after_subtree_move(events[:3], 9 * B) == (events[:3], 9 * B)
    assert cut_after_subtree_move(events[2:], 9 * B) == (events[2:], 9 * B)
