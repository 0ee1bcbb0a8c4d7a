"""A delete runs whole in the server (``pathkeeper_delete``; alone, one statement in
autocommit): the same result, event and errors alone as inside a group, the messages
the rule always gave, its claim of event positions after every lock wait, one plan per
connection, and a create that commits inside the subtree meanwhile makes it run again."""

from __future__ import annotations

import threading

from reliability.dbcheck import fold_log, table_rows, tree_violations
from tree_checks import (
    assert_waiting_call_holds_no_positions,
    check_claim_after_call,
    plans_of,
    wait_for_lock_waiter,
)

from coordinator import Coordinator, CoordinatorError
from coordinator.commands import Delete
from coordinator.event_reader import read_events
from coordinator.results import MutationResult
from coordinator.single_statement import function_logged_sql


def _deleted_events(coord: Coordinator, ns: str) -> list[dict[str, object]]:
    events, _ = read_events(coord.engine, None, 10_000, namespaces=[ns])
    return [e.payload for e in events if e.type == "deleted"]


def test_lone_and_grouped_deletes_answer_and_log_alike(coord: Coordinator) -> None:
    payloads: dict[str, list[dict[str, object]]] = {}
    refusals: dict[str, list[tuple[str, str]]] = {}
    answers: dict[str, list[tuple[str, str, int]]] = {}
    for how in ("alone", "grouped"):
        ns = f"d_{how}"
        coord.create_namespace(ns)
        coord.mkdir(ns, "/d/e/f", parents=True)
        coord.create_file(ns, "/d/e/f/x", "x")
        coord.create_file(ns, "/g", "g")
        coord.mkdir(ns, "/h")
        by_id = coord.create_file(ns, "/k", "k").node.id

        def run(ref: str, recursive: bool = False, if_version: int | None = None,
                how: str = how, ns: str = ns) -> MutationResult:
            if how == "alone":
                return coord.delete(ns, ref, recursive, if_version)
            with coord.transaction(ns) as group:
                return group.delete(ref, recursive, if_version)

        refusals[how] = []
        for args in [("/",), ("/d",), ("/x",), ("/g/h",), ("/d/e/y/z",), ("/g", False, 7),
                     ("0f0e0d0c-0b0a-4908-8706-050403020100",)]:
            try:
                run(*args)  # type: ignore[arg-type]
            except CoordinatorError as exc:
                refusals[how].append((type(exc).__name__, str(exc)))
        done = [run("/d/e", True), run("/g", False, 1), run("/h"), run(by_id)]
        assert all(r.seq is not None for r in done)
        answers[how] = [(r.node.path, r.node.kind, r.node.version) for r in done]
        payloads[how] = [{k: v for k, v in p.items() if k != "id"}
                         for p in _deleted_events(coord, ns)]
        assert [n.path for n in coord.walk(ns)] == ["/", "/d"]
    assert answers["alone"] == answers["grouped"] == [
        ("/d/e", "dir", 1), ("/g", "file", 1), ("/h", "dir", 1), ("/k", "file", 1)]
    assert payloads["alone"] == payloads["grouped"]
    assert [(p["path"], p["recursive"], p["count"]) for p in payloads["alone"]] == [
        ("/d/e", True, 3), ("/g", False, 1), ("/h", False, 1), ("/k", False, 1)]
    assert refusals["alone"] == refusals["grouped"] == [
        ("InvalidMove", "cannot delete the root (drop the namespace instead)"),
        ("DirectoryNotEmpty", "/d is not empty"),
        ("NotFound", "/x does not exist"),
        ("NotADirectory", "/g is a file"),
        ("NotFound", "/d/e/y does not exist"),
        ("Conflict", "version is 1, expected 7"),
        ("NotFound", "no node with id 0f0e0d0c-0b0a-4908-8706-050403020100"),
    ]


def test_a_create_committed_inside_the_subtree_meanwhile_makes_the_delete_run_again(
    coord: Coordinator,
) -> None:
    """The delete takes its subtree from its snapshot; a create under /a/b that commits
    while the delete waits for /a/b leaves a row the delete did not see, and the foreign
    key refuses to delete /a/b from under it: the delete runs again and takes it too."""
    ns = "race"
    coord.create_namespace(ns)
    coord.mkdir(ns, "/a/b", parents=True)
    outcome: list[MutationResult | CoordinatorError] = []

    def delete_a() -> None:
        try:
            outcome.append(coord.delete(ns, "/a", recursive=True))
        except CoordinatorError as exc:
            outcome.append(exc)

    with coord.transaction(ns) as group:
        group.create_file("/a/b/new", "n")  # key-share on /a/b until commit
        deleter = threading.Thread(target=delete_a)
        deleter.start()
        wait_for_lock_waiter(coord)
    deleter.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], MutationResult), outcome
    assert [n.path for n in coord.walk(ns)] == ["/"]
    assert [(p["path"], p["count"]) for p in _deleted_events(coord, ns)] == [("/a", 3)]
    assert tree_violations(coord.engine, ns) == []
    fold, _ = fold_log(coord, [ns])
    assert fold.trees[ns].rows() == table_rows(coord.engine, ns)


def test_a_lone_delete_waiting_for_its_node_holds_no_positions(coord: Coordinator) -> None:
    ns = "wait"
    coord.create_namespace(ns)
    coord.create_file(ns, "/f", "f")
    results: list[object] = []
    deleter = threading.Thread(target=lambda: results.append(coord.delete(ns, "/f")),
                               daemon=True)
    with coord.transaction(ns) as group:
        group.write_file("/f", "g")  # holds /f's row until the group ends
        deleter.start()
        assert_waiting_call_holds_no_positions(coord, "pathkeeper_delete")
    deleter.join(20)
    assert len(results) == 1
    # Deleted after the write it waited for: the write's version is the one it deleted.
    assert [p["version"] for p in _deleted_events(coord, ns)] == [2]


def test_lone_deletes_reuse_one_plan(database_url: str) -> None:
    with Coordinator.connect(database_url, pool_size=1, max_overflow=0) as coord:
        coord.create_namespace("t")
        for i in range(30):
            coord.create_file("t", f"/f{i}")
        for i in range(30):
            coord.delete("t", f"/f{i}")
        assert plans_of(coord, "pathkeeper_delete") == (20, 5)


def test_lone_delete_claims_its_block_after_the_function(coord: Coordinator) -> None:
    params = [("ns", "text", "'t'"), ("ref", "text", "'/f'"), ("parts", "text[]", "'{f}'"),
              ("id", "uuid", "NULL"), ("recursive", "boolean", "false"),
              ("if_version", "bigint", "NULL")]
    check_claim_after_call(coord, function_logged_sql(Delete.function), params, "pathkeeper_delete",
                           "(r_1.id IS NOT NULL)")
