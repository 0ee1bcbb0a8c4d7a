"""Deterministic replays of races the concurrent histories found.

Each test holds one transaction open (a group), lets a second call run into its
lock, waits until PostgreSQL shows that call waiting (an explicit condition, not a
sleep), then commits the first. The outcome must be one of the serial orders.
"""

from __future__ import annotations

import threading

from tree_checks import wait_for_lock_waiter

from coordinator import Coordinator
from coordinator.errors import CoordinatorError
from coordinator.results import MutationResult

from .dbcheck import fold_log, table_rows, tree_violations


def test_recursive_delete_spares_a_node_moved_out_meanwhile(coord: Coordinator) -> None:
    """Found by the concurrent-history test: the recursive DELETE took the subtree from
    its snapshot and deleted a node that a committed move had taken out of it."""
    ns = "race"
    coord.create_namespace(ns)
    coord.mkdir(ns, "/a/x/y", parents=True)
    coord.mkdir(ns, "/b")
    outcome: list[MutationResult | CoordinatorError] = []

    def delete_a() -> None:
        try:
            outcome.append(coord.delete(ns, "/a", recursive=True))
        except CoordinatorError as exc:
            outcome.append(exc)

    with coord.transaction(ns) as group:
        group.move("/a/x", "/b/x")  # holds x's row lock until commit
        deleter = threading.Thread(target=delete_a)
        deleter.start()
        wait_for_lock_waiter(coord)  # the delete has its snapshot and waits for x
    deleter.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], MutationResult), outcome
    # Serially the move came first (it committed first, at the lower position), so
    # the delete of /a removes /a alone and /b/x/y lives on.
    assert outcome[0].seq is not None
    assert [n.path for n in coord.walk(ns)] == ["/", "/b", "/b/x", "/b/x/y"]


def test_history_checks_hold_after_the_race(coord: Coordinator) -> None:
    """The same interleaving, but the node moved INTO the deleted subtree meanwhile:
    the delete must retry or include it; either way the log must explain the table."""
    ns = "race"
    coord.create_namespace(ns)
    coord.mkdir(ns, "/a/z", parents=True)
    coord.mkdir(ns, "/b/x/y", parents=True)
    outcome: list[MutationResult | CoordinatorError] = []

    def delete_a() -> None:
        try:
            outcome.append(coord.delete(ns, "/a", recursive=True))
        except CoordinatorError as exc:
            outcome.append(exc)

    with coord.transaction(ns) as group:
        group.move("/b/x", "/a/z/x")  # key-share on /a and /a/z: the delete waits
        deleter = threading.Thread(target=delete_a)
        deleter.start()
        wait_for_lock_waiter(coord)
    deleter.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], MutationResult), outcome
    assert [n.path for n in coord.walk(ns)] == ["/", "/b"]
    assert tree_violations(coord.engine, ns) == []
    fold, _ = fold_log(coord, [ns])
    assert fold.trees[ns].rows() == table_rows(coord.engine, ns)
