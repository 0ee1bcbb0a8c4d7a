"""A move runs whole in the server (``pathkeeper_move``; alone, one statement in
autocommit): the same result, event and errors alone as inside a group, the messages the
rule always gave, its claim of event positions after every lock wait, and one plan per
connection."""

from __future__ import annotations

import threading

from tree_checks import (
    assert_waiting_call_holds_no_positions,
    check_claim_after_call,
    plans_of,
)

from coordinator import Coordinator, CoordinatorError
from coordinator.commands import Move
from coordinator.event_reader import read_events
from coordinator.results import MutationResult
from coordinator.single_statement import function_logged_sql


def _moved_events(coord: Coordinator, ns: str) -> list[dict[str, object]]:
    events, _ = read_events(coord.engine, None, 10_000, namespaces=[ns])
    return [e.payload for e in events if e.type == "moved"]


def test_lone_and_grouped_moves_answer_and_log_alike(database_url: str) -> None:
    """Every outcome of a move, alone and inside a group, with a depth limit of 5."""
    payloads: dict[str, list[dict[str, object]]] = {}
    refusals: dict[str, list[tuple[str, str]]] = {}
    answers: dict[str, list[tuple[str, str, int, bool]]] = {}
    with Coordinator.connect(database_url, max_depth=5) as coord:
        for how in ("alone", "grouped"):
            ns = f"m_{how}"
            coord.create_namespace(ns)
            coord.mkdir(ns, "/a/b/c", parents=True)
            coord.mkdir(ns, "/x/y/z/w", parents=True)
            coord.create_file(ns, "/a/f", "f")
            coord.create_file(ns, "/x/g", "g")
            by_id = coord.create_file(ns, "/k", "k").node.id

            def run(ref: str, dst: str, if_version: int | None = None, how: str = how,
                    ns: str = ns) -> MutationResult:
                if how == "alone":
                    return coord.move(ns, ref, dst, if_version)
                with coord.transaction(ns) as group:
                    return group.move(ref, dst, if_version)

            refusals[how] = []
            for args in [("/", "/z"), ("/a", "/a/b/a"), ("/a", "/a/a"), ("/a/f", "/x/g"),
                         ("/a/f", "/nope/f"), ("/a/f", "/x/g/f"), ("/nope", "/x/n"),
                         ("/a/f", "/x/f2", 7), ("/a", "/x/y/z/w/a"),
                         ("0f0e0d0c-0b0a-4908-8706-050403020100", "/z")]:
                try:
                    run(*args)  # type: ignore[arg-type]
                except CoordinatorError as exc:
                    refusals[how].append((type(exc).__name__, str(exc)))
            done = [run("/a/f", "/x/f"), run("/a/b", "/x/b"), run("/x/b/c", "/x/b/c2"),
                    run(by_id, "/a/k"), run("/a/k", "/a/k"), run("/x/y", "/a/y")]
            answers[how] = [(r.node.path, r.node.kind, r.node.version, r.seq is None)
                            for r in done]
            payloads[how] = [{k: v for k, v in p.items()
                              if k not in ("id", "old_parent_id", "parent_id")}
                             for p in _moved_events(coord, ns)]
            assert [n.path for n in coord.walk(ns)] == [
                "/", "/a", "/a/k", "/a/y", "/a/y/z", "/a/y/z/w", "/x", "/x/b", "/x/b/c2",
                "/x/f", "/x/g"]
    assert answers["alone"] == answers["grouped"] == [
        ("/x/f", "file", 2, False), ("/x/b", "dir", 2, False), ("/x/b/c2", "dir", 2, False),
        ("/a/k", "file", 2, False), ("/a/k", "file", 2, True), ("/a/y", "dir", 2, False)]
    assert payloads["alone"] == payloads["grouped"]
    assert [(p["old_path"], p["path"]) for p in payloads["alone"]] == [
        ("/a/f", "/x/f"), ("/a/b", "/x/b"), ("/x/b/c", "/x/b/c2"), ("/k", "/a/k"),
        ("/x/y", "/a/y")]
    assert refusals["alone"] == refusals["grouped"] == [
        ("InvalidMove", "cannot move the root"),
        ("InvalidMove", "cannot move a directory into itself or its own subtree"),
        ("InvalidMove", "cannot move a directory into itself"),
        ("AlreadyExists", "/x/g already exists"),
        ("NotFound", "/nope does not exist"),
        ("NotADirectory", "/x/g is a file"),
        ("NotFound", "/nope does not exist"),
        ("Conflict", "version is 1, expected 7"),
        ("InvalidMove", "moving to /x/y/z/w/a would put nodes deeper than 5 levels (the "
                        "directory has at least 1 levels below it; at most 0 fit there)"),
        ("NotFound", "no node with id 0f0e0d0c-0b0a-4908-8706-050403020100"),
    ]


def test_a_lone_move_waiting_for_its_node_holds_no_positions(coord: Coordinator) -> None:
    ns = "wait"
    coord.create_namespace(ns)
    coord.mkdir(ns, "/d")
    coord.create_file(ns, "/f", "f")
    results: list[object] = []
    mover = threading.Thread(target=lambda: results.append(coord.move(ns, "/f", "/d/f")),
                             daemon=True)
    with coord.transaction(ns) as group:
        group.write_file("/f", "g")  # holds /f's row until the group ends
        mover.start()
        assert_waiting_call_holds_no_positions(coord, "pathkeeper_move")
    mover.join(20)
    assert len(results) == 1
    assert coord.stat(ns, "/d/f").content == "g"


def test_lone_moves_reuse_one_plan(database_url: str) -> None:
    with Coordinator.connect(database_url, pool_size=1, max_overflow=0) as coord:
        coord.create_namespace("t")
        coord.mkdir("t", "/a")
        coord.mkdir("t", "/b")
        coord.create_file("t", "/a/f")
        for _ in range(15):
            coord.move("t", "/a/f", "/b/f")
            coord.move("t", "/b/f", "/a/f")
        # As for the rename: custom plans for the first 5 prepared runs, then generic.
        assert plans_of(coord, "pathkeeper_move") == (20, 5)


def test_lone_move_claims_its_block_after_the_function(coord: Coordinator) -> None:
    params = [("ns", "text", "'t'"), ("ref", "text", "'/f'"), ("parts", "text[]", "'{f}'"),
              ("id", "uuid", "NULL"), ("dst", "text[]", "'{d}'"), ("name", "text", "'f'"),
              ("if_version", "bigint", "NULL"), ("max_depth", "integer", "100")]
    check_claim_after_call(coord, function_logged_sql(Move.function), params,
                           "pathkeeper_move", "r_1.changed")
