"""Content and metadata writes run whole in the server (``pathkeeper_write``,
``pathkeeper_set_metadata``; alone, one statement in autocommit): the same result, event
and errors alone as inside a group, the messages the rule always gave, a lock that lets
creates under the directory go on, the claim after every lock wait, one plan per
connection."""

from __future__ import annotations

import threading

from tree_checks import (
    assert_waiting_call_holds_no_positions,
    check_claim_after_call,
    plans_of,
)

from coordinator import Coordinator, CoordinatorError
from coordinator.commands import SetMetadata, WriteFile
from coordinator.event_reader import read_events
from coordinator.results import MutationResult
from coordinator.single_statement import function_logged_sql


def _write_events(coord: Coordinator, ns: str) -> list[tuple[str, dict[str, object]]]:
    events, _ = read_events(coord.engine, None, 10_000, namespaces=[ns])
    return [(e.type, {k: v for k, v in e.payload.items() if k != "id"}) for e in events
            if e.type in ("written", "metadata_set")]


def test_lone_and_grouped_writes_answer_and_log_alike(coord: Coordinator) -> None:
    events: dict[str, list[tuple[str, dict[str, object]]]] = {}
    refusals: dict[str, list[tuple[str, str]]] = {}
    answers: dict[str, list[tuple[str, str | None, dict[str, object], int]]] = {}
    for how in ("alone", "grouped"):
        ns = f"w_{how}"
        coord.create_namespace(ns)
        coord.mkdir(ns, "/d")
        coord.create_file(ns, "/d/f", "one", {"a": 1})
        by_id = coord.create_file(ns, "/g", "g").node.id

        def write(ref: str, content: str, metadata: dict[str, object] | None = None,
                  if_version: int | None = None, how: str = how, ns: str = ns
                  ) -> MutationResult:
            if how == "alone":
                return coord.write_file(ns, ref, content, metadata, if_version)
            with coord.transaction(ns) as group:
                return group.write_file(ref, content, metadata, if_version)

        def set_md(ref: str, metadata: dict[str, object], if_version: int | None = None,
                   how: str = how, ns: str = ns) -> MutationResult:
            if how == "alone":
                return coord.set_metadata(ns, ref, metadata, if_version)
            with coord.transaction(ns) as group:
                return group.set_metadata(ref, metadata, if_version)

        refusals[how] = []
        for attempt in (lambda: write("/d", "x"), lambda: set_md("/", {"r": 1}),
                        lambda: write("/d/f", "x", None, 9), lambda: set_md("/d", {}, 9),
                        lambda: write("/d/nope", "x"), lambda: write("/d/f/x", "x"),
                        lambda: set_md("0f0e0d0c-0b0a-4908-8706-050403020100", {})):
            try:
                attempt()
            except CoordinatorError as exc:
                refusals[how].append((type(exc).__name__, str(exc)))
        done = [write("/d/f", "two"), write("/d/f", "three", {"b": 2}, 2),
                set_md("/d", {"dir": True}), set_md(by_id, {"g": 1}, 1)]
        answers[how] = [(r.node.path, r.node.content, dict(r.node.metadata), r.node.version)
                        for r in done]
        assert all(r.seq is not None for r in done)
        events[how] = _write_events(coord, ns)
    assert answers["alone"] == answers["grouped"] == [
        ("/d/f", "two", {"a": 1}, 2), ("/d/f", "three", {"b": 2}, 3),
        ("/d", None, {"dir": True}, 2), ("/g", None, {"g": 1}, 2)]  # a write answers the
    # content it wrote; a metadata change leaves it out
    assert events["alone"] == events["grouped"]
    assert [(t, p["path"], p["version"]) for t, p in events["alone"]] == [
        ("written", "/d/f", 2), ("written", "/d/f", 3), ("metadata_set", "/d", 2),
        ("metadata_set", "/g", 2)]
    assert refusals["alone"] == refusals["grouped"] == [
        ("IsADirectory", "/d is a directory"),
        ("InvalidArgument", "the root has no metadata"),
        ("Conflict", "version is 1, expected 9"),
        ("Conflict", "version is 1, expected 9"),
        ("NotFound", "/d/nope does not exist"),
        ("NotADirectory", "/d/f is a file"),
        ("NotFound", "no node with id 0f0e0d0c-0b0a-4908-8706-050403020100"),
    ]


def test_a_metadata_write_lets_creates_under_the_directory_go_on(coord: Coordinator) -> None:
    """``FOR NO KEY UPDATE``, not ``FOR UPDATE``: the create's foreign-key check takes
    ``FOR KEY SHARE`` on the directory, which a metadata write does not block."""
    ns = "nokey"
    coord.create_namespace(ns)
    coord.mkdir(ns, "/d")
    created: list[MutationResult] = []
    with coord.transaction(ns) as group:
        group.set_metadata("/d", {"busy": True})  # holds /d's row until the group ends
        creator = threading.Thread(
            target=lambda: created.append(coord.create_file(ns, "/d/x", "x")), daemon=True)
        creator.start()
        creator.join(20)
        assert len(created) == 1  # while the group is still open
    assert coord.stat(ns, "/d").metadata == {"busy": True}


def test_a_lone_write_waiting_for_its_node_holds_no_positions(coord: Coordinator) -> None:
    ns = "wait"
    coord.create_namespace(ns)
    coord.create_file(ns, "/f", "f")
    results: list[object] = []
    writer = threading.Thread(target=lambda: results.append(coord.write_file(ns, "/f", "h")),
                              daemon=True)
    with coord.transaction(ns) as group:
        group.write_file("/f", "g")  # holds /f's row until the group ends
        writer.start()
        assert_waiting_call_holds_no_positions(coord, "pathkeeper_write")
    writer.join(20)
    assert len(results) == 1
    assert (coord.stat(ns, "/f").content, coord.stat(ns, "/f").version) == ("h", 3)


def test_lone_writes_reuse_one_plan(database_url: str) -> None:
    with Coordinator.connect(database_url, pool_size=1, max_overflow=0) as coord:
        coord.create_namespace("t")
        coord.create_file("t", "/f")
        # As for the rename: custom plans for the first 5 prepared runs, then generic.
        # (One look each: the look's transaction ends in a ROLLBACK, after which psycopg
        # deallocates what it prepared on that connection.)
        for i in range(30):
            coord.write_file("t", "/f", f"v{i}")
        assert plans_of(coord, "pathkeeper_write") == (20, 5)
        for i in range(30):
            coord.set_metadata("t", "/f", {"i": i})
        assert plans_of(coord, "pathkeeper_set_metadata") == (20, 5)


def test_lone_writes_claim_their_block_after_the_function(coord: Coordinator) -> None:
    target = [("ns", "text", "'t'"), ("ref", "text", "'/f'"), ("parts", "text[]", "'{f}'"),
              ("id", "uuid", "NULL")]
    check_claim_after_call(
        coord, function_logged_sql(WriteFile.function),
        [*target, ("content", "text", "'x'"), ("metadata", "text", "NULL"),
         ("if_version", "bigint", "NULL")],
        "pathkeeper_write", "(r_1.id IS NOT NULL)")
    check_claim_after_call(
        coord, function_logged_sql(SetMetadata.function),
        [*target, ("metadata", "text", "'{}'"), ("if_version", "bigint", "NULL")],
        "pathkeeper_set_metadata", "(r_1.id IS NOT NULL)")
