"""``copy``: a file, or a directory with its whole subtree, to a new parent and/or name,
in one transaction, on real PostgreSQL: the copies, their events, the refusals (worded
as the other commands word them), its limits, a group, and a race with a rename."""

from __future__ import annotations

import json
import threading
import time

import pytest
from sqlalchemy.exc import DBAPIError
from tree_checks import at_barrier, check_tree, outcome, run_threads

from coordinator import (
    AlreadyExists,
    Conflict,
    Coordinator,
    CoordinatorError,
    Copy,
    CreateFile,
    InvalidMove,
    Mkdir,
    NotADirectory,
    NotFound,
    TooLarge,
)
from coordinator.db import Driver, translate
from coordinator.events import Created
from coordinator.server_calls import MAX_COPY_NODES, CopyCall


def seed(coord: Coordinator, ns: str) -> None:
    coord.create_namespace(ns)
    coord.mkdir(ns, "/src/sub/deep", parents=True)
    coord.create_file(ns, "/src/a.txt", "alpha", {"lang": "en"})
    coord.create_file(ns, "/src/sub/b.txt", "beta")
    coord.create_file(ns, "/src/sub/deep/c.txt", "gamma", {"k": [1, 2]})
    coord.mkdir(ns, "/dst")


def subtree(coord: Coordinator, ns: str, top: str) -> dict[str, tuple[str, str | None, object]]:
    """Each node under ``top`` (included) by its path relative to ``top``."""
    return {
        n.path[len(top):] or "/": (n.kind, n.content, n.metadata)
        for n in coord.walk(ns, top)
    }


def test_copy_a_file(coord: Coordinator) -> None:
    seed(coord, "c")
    src = coord.stat("c", "/src/a.txt")
    result = coord.copy("c", "/src/a.txt", "/dst")
    copy = coord.stat("c", "/dst/a.txt")
    assert result.node.path == "/dst/a.txt" and result.node.id == copy.id != src.id
    assert (copy.content, copy.metadata, copy.version) == ("alpha", {"lang": "en"}, 1)
    assert result.seq is not None
    # Under a new name, by id, in the same directory.
    renamed = coord.copy("c", src.id, "/src", name="a2.txt")
    assert coord.stat("c", "/src/a2.txt").content == "alpha"
    assert renamed.node.path == "/src/a2.txt"
    assert coord.stat("c", "/src/a.txt") == src  # the source is untouched
    check_tree(coord, "c")


def test_copy_a_subtree_writes_one_created_event_per_node_parents_first(
    coord: Coordinator,
) -> None:
    seed(coord, "c")
    before = subtree(coord, "c", "/src")
    result = coord.copy("c", "/src", "/dst", name="copy")
    assert subtree(coord, "c", "/dst/copy") == before
    assert subtree(coord, "c", "/src") == before
    new_ids = {n.id for n in coord.walk("c", "/dst/copy")}
    assert not new_ids & {n.id for n in coord.walk("c", "/src")}
    events = [e for e in coord.read_events(after=0, limit=1000)[0] if e.node_id in new_ids]
    assert len(events) == len(new_ids) == 6
    assert all(isinstance(e.change, Created) for e in events)
    # One transaction: one block, the top's event first, every parent before its
    # children; the result's seq is the last, so waiting for it waits for every copy.
    assert len({e.transaction_block for e in events}) == 1
    assert events[0].node_id == result.node.id and events[-1].position == result.seq
    seen: set[str] = set()
    for e in events:
        change = e.change
        assert isinstance(change, Created)
        assert change.path == coord.get("c", change.id).path
        assert change.parent_id in seen or change.id == result.node.id
        seen.add(change.id)
    check_tree(coord, "c")


def test_a_lone_copy_answers_and_logs_as_one_in_a_group(coord: Coordinator) -> None:
    """Alone, a copy is one statement whose events are built in the server; in a group,
    ``TreeTx`` appends them from the rows: the same events (payloads, order, one block)
    and the same answer, the top node without its content."""
    logged = {}
    for how in ("alone", "grouped"):
        seed(coord, how)
        copy = Copy("/src", "/dst", "copy")
        result = coord.execute(how, copy) if how == "alone" else coord.apply(how, [copy])[0]
        assert (result.node.path, result.node.kind, result.node.content) == (
            "/dst/copy", "dir", None)
        file = coord.execute(how, Copy("/src/a.txt", "/dst"))
        assert (file.node.path, file.node.content) == ("/dst/a.txt", None)
        events = [e for e in coord.read_events(after=0, limit=1000)[0]
                  if e.namespace == how and e.position >= result.seq - 5]
        assert events[-1].position == file.seq and events[-2].position == result.seq
        names = {e.node_id: e.payload["path"] for e in events}
        logged[how] = [
            (e.position - events[0].position, e.type, names.get(e.payload["parent_id"]),
             {k: v for k, v in e.payload.items() if k not in ("id", "parent_id")})
            for e in events]
    assert logged["alone"] == logged["grouped"]
    assert [(p["path"], p["content"]) for _, _, _, p in logged["alone"]] == [
        ("/dst/copy", None), ("/dst/copy/a.txt", "alpha"), ("/dst/copy/sub", None),
        ("/dst/copy/sub/b.txt", "beta"), ("/dst/copy/sub/deep", None),
        ("/dst/copy/sub/deep/c.txt", "gamma"), ("/dst/a.txt", "alpha")]


def test_refusals_are_worded_like_the_other_commands(coord: Coordinator) -> None:
    seed(coord, "c")
    with pytest.raises(InvalidMove, match=r"^cannot copy /src into itself or its own subtree"):
        coord.copy("c", "/src", "/src/sub")
    with pytest.raises(InvalidMove, match=r"^cannot copy /src into itself"):
        coord.copy("c", "/src", "/src")
    with pytest.raises(InvalidMove, match=r"^cannot copy the root$"):
        coord.copy("c", "/", "/dst")
    # The same words as a create's or a move's.
    with pytest.raises(AlreadyExists, match=r"^/src/a\.txt already exists$"):
        coord.copy("c", "/src/a.txt", "/src")
    with pytest.raises(AlreadyExists, match=r"^/src/a\.txt already exists$"):
        coord.create_file("c", "/src/a.txt")
    with pytest.raises(Conflict, match=r"^version is 1, expected 7$"):
        coord.copy("c", "/src", "/dst", if_version=7)
    with pytest.raises(NotFound, match=r"^/nope does not exist$"):
        coord.copy("c", "/nope", "/dst")
    with pytest.raises(NotFound, match=r"^/nope does not exist$"):
        coord.move("c", "/nope", "/dst/x")
    with pytest.raises(NotFound, match=r"^/dst/nope does not exist$"):
        coord.copy("c", "/src", "/dst/nope")
    with pytest.raises(NotADirectory, match=r"^/src/a\.txt is a file$"):
        coord.copy("c", "/src/sub", "/src/a.txt")
    with pytest.raises(NotFound, match=r"^no node with id "):
        coord.copy("c", "00000000-0000-4000-8000-000000000000", "/dst")
    # A stale version passes when it is the current one.
    assert coord.copy("c", "/src", "/dst", if_version=1).node.path == "/dst/src"
    assert subtree(coord, "c", "/dst/src") == subtree(coord, "c", "/src")
    check_tree(coord, "c")


def test_a_copy_is_bounded_in_nodes_and_depth(database_url: str) -> None:
    """A subtree that would end deeper than ``max_depth``, or more nodes than the limit,
    is refused whole: nothing is written."""
    with Coordinator.connect(database_url, max_depth=6) as coord:
        seed(coord, "c")
        coord.mkdir("c", "/dst/x/y", parents=True)
        before = (len(list(coord.walk("c"))), len(coord.read_events(after=0, limit=10_000)[0]))
        # /src has 3 levels below it: under /dst/x/y (3) its deepest node would be at 7.
        with pytest.raises(InvalidMove, match=(
                r"^copying to /dst/x/y/src would put nodes deeper than 6 levels \(the "
                r"directory has at least 3 levels below it; at most 2 fit there\)$")):
            coord.copy("c", "/src", "/dst/x/y")
        assert (len(list(coord.walk("c"))),
                len(coord.read_events(after=0, limit=10_000)[0])) == before
        assert coord.copy("c", "/src", "/dst/x").node.path == "/dst/x/src"
        # /src has 6 nodes: the function refuses it under a limit of 5.
        call = CopyCall.of("c", "/src", "/dst", "small", None, 6, max_nodes=5)
        with coord.engine.connect() as conn, pytest.raises(DBAPIError) as info:
            Driver(conn).all(call.sql, call.params)
        error = translate(info.value)
        assert isinstance(error, TooLarge)
        assert str(error) == ("copying /src would create more than 5 nodes (at most 5 are "
                              "copied in one transaction)")
        with pytest.raises(NotFound):
            coord.stat("c", "/dst/small")
        assert CopyCall.of("c", "/src", "/dst", None, None, 6).max_nodes == MAX_COPY_NODES


def test_a_copy_in_a_group(coord: Coordinator) -> None:
    seed(coord, "c")
    results = coord.apply("c", [
        Mkdir("/g"), CreateFile("/g/f", "x"), Copy("/g", "/dst"), Copy("/dst/g/f", "/")
    ])
    assert [r.node.path for r in results] == ["/g", "/g/f", "/dst/g", "/f"]
    assert coord.stat("c", "/dst/g/f").content == "x"
    assert coord.stat("c", "/f").content == "x"
    assert len({r.seq for r in results}) == 4
    # A failing copy rolls the whole group back.
    with pytest.raises(AlreadyExists) as info:
        coord.apply("c", [Mkdir("/h"), Copy("/src/a.txt", "/h"), Copy("/src/a.txt", "/h")])
    assert getattr(info.value, "index", None) == 2
    with pytest.raises(NotFound):
        coord.stat("c", "/h")
    with coord.transaction("c") as g:
        g.copy("/src/sub", "/dst", "sub2")
        g.rename("/dst/sub2", "sub3")
    assert subtree(coord, "c", "/dst/sub3") == subtree(coord, "c", "/src/sub")
    check_tree(coord, "c")


def test_a_copy_racing_a_rename_of_the_sources_parent_sees_one_state(
    coord: Coordinator,
) -> None:
    """The copy (its own connection) and a rename of the source's parent (another):
    either the copy came first and is whole under the renamed directory, or the rename
    came first and the copy is refused as the source's path no longer exists; never a
    copy with part of the subtree, or one that landed under a path that is gone."""
    coord.create_namespace("r")
    copied = refused = 0
    for _ in range(20):
        coord.mkdir("r", "/p/src/d", parents=True)
        for i in range(5):
            coord.create_file("r", f"/p/src/d/f{i}", str(i))
        want = subtree(coord, "r", "/p/src")
        barrier = threading.Barrier(2, timeout=20)
        ren, cp = run_threads([
            outcome(at_barrier(barrier, coord.rename, "r", "/p", "q")),
            outcome(at_barrier(barrier, coord.copy, "r", "/p/src", "/p", "copy")),
        ])
        assert not isinstance(ren, CoordinatorError), ren
        if isinstance(cp, CoordinatorError):
            assert isinstance(cp, NotFound), cp
            assert str(cp) == "/p does not exist"
            assert [n.name for n in coord.listdir("r", "/q")] == ["src"]
            refused += 1
        else:
            assert coord.get("r", cp.node.id).path == "/q/copy"
            assert subtree(coord, "r", "/q/copy") == want
            copied += 1
        assert subtree(coord, "r", "/q/src") == want
        check_tree(coord, "r")
        coord.delete("r", "/q", recursive=True)
    assert copied + refused == 20
    # With the rename held open, a copy by id does not wait for it (it locks only the
    # source, and its destination is elsewhere) and lands whole.
    coord.mkdir("r", "/p/src/d", parents=True)
    src = coord.stat("r", "/p/src")
    with coord.transaction("r") as g:
        g.rename("/p", "q")
        r = run_threads([lambda: coord.copy("r", src.id, "/", "top")])[0]
    assert coord.get("r", r.node.id).path == "/top"
    assert subtree(coord, "r", "/top") == subtree(coord, "r", "/q/src")
    check_tree(coord, "r")


def test_the_node_limit_is_exact_at_its_real_size(coord: Coordinator) -> None:
    """A subtree of exactly ``MAX_COPY_NODES`` nodes copies (and how long that takes is
    printed: the limit's cost); one more node and the copy is refused, nothing written."""
    coord.create_namespace("big")
    lines = [json.dumps({"path": f"/big/d{i // 100}/f{i}", "kind": "file", "content": "x"})
             for i in range(MAX_COPY_NODES - 100)]  # and 99 directories, and /big
    coord.import_nodes("big", lines)
    assert len(list(coord.walk("big", "/big"))) == MAX_COPY_NODES
    started = time.perf_counter()
    result = coord.copy("big", "/big", "/", "big2")
    took = time.perf_counter() - started
    print(f"\ncopy of {MAX_COPY_NODES} nodes: {took:.2f} s")
    assert result.node.path == "/big2"
    assert len(list(coord.walk("big", "/big2"))) == MAX_COPY_NODES
    coord.create_file("big", "/big/one-more")
    events = len(coord.read_events(after=0, limit=100_000)[0])
    with pytest.raises(TooLarge, match=(
            rf"^copying /big would create more than {MAX_COPY_NODES} nodes")):
        coord.copy("big", "/big", "/", "big3")
    assert len(coord.read_events(after=0, limit=100_000)[0]) == events
    with pytest.raises(NotFound):
        coord.stat("big", "/big3")
