"""Basic behaviour of every ``Coordinator`` method: results, nodes, events, errors by path
and by id, ``if_version``, namespaces, walk, listdir paging, groups."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import cast

import pytest
from sqlalchemy import text
from tree_checks import db_state, event_rows

from coordinator import (
    AlreadyExists,
    Conflict,
    Coordinator,
    CoordinatorError,
    CreateFile,
    DirectoryNotEmpty,
    InvalidArgument,
    InvalidMove,
    IsADirectory,
    Mkdir,
    MutationResult,
    Node,
    NotADirectory,
    NotFound,
    Rename,
    SetMetadata,
    TooLarge,
    Unavailable,
)
from coordinator.events import MetadataSet
from pathkeeper.local.ports import free_port


def last_event(coord: Coordinator) -> tuple[object, ...]:
    return event_rows(coord)[-1]


def test_mutations_return_node_and_seq(coord: Coordinator, ns: str) -> None:
    d = coord.mkdir(ns, "/d")
    assert isinstance(d, MutationResult)
    assert (d.node.path, d.node.name, d.node.kind, d.node.version) == ("/d", "d", "dir", 1)
    assert d.node.namespace == ns and d.node.parent_id == coord.stat(ns, "/").id
    f = coord.create_file(ns, "/d/f", "hello", {"lang": "en"})
    assert f.node.content == "hello" and f.node.metadata == {"lang": "en"}
    assert f.seq is not None and d.seq is not None and f.seq > d.seq
    assert last_event(coord)[0] == f.seq
    w = coord.write_file(ns, "/d/f", "bye")
    assert (w.node.content, w.node.version, w.node.metadata) == ("bye", 2, {"lang": "en"})
    m = coord.move(ns, "/d/f", "/g")
    assert (m.node.path, m.node.version, m.node.parent_id) == ("/g", 3, d.node.parent_id)
    r = coord.rename(ns, "/g", "h")
    assert (r.node.path, r.node.name, r.node.version) == ("/h", "h", 4)
    x = coord.delete(ns, "/h")
    # As it was, without its content: only a change that sets the content answers it.
    assert (x.node.path, x.node.version, x.node.content) == ("/h", 4, None)
    assert (m.node.content, r.node.content) == (None, None)
    seqs = [d.seq, f.seq, w.seq, m.seq, r.seq, x.seq]
    assert None not in seqs and seqs == sorted(s or 0 for s in seqs)
    events, _ = coord.read_events(wait=5.0)
    assert [e.type for e in events] == [
        "namespace_created", "created", "created", "written", "moved", "moved", "deleted"
    ]
    assert [e.position for e in events[1:]] == seqs
    # The wire form, as stored and served; "v" is the payload version (coordinator.events).
    created = events[2].payload
    assert created == {
        "id": f.node.id, "parent_id": d.node.id, "name": "f", "kind": "file", "path": "/d/f",
        "content": "hello", "metadata": {"lang": "en"}, "version": 1, "v": 1,
    }
    assert events[4].payload == {
        "id": f.node.id, "kind": "file", "old_parent_id": d.node.id, "old_name": "f",
        "old_path": "/d/f", "parent_id": d.node.parent_id, "name": "g", "path": "/g",
        "version": 3, "v": 1,
    }
    assert events[6].payload == {
        "id": f.node.id, "kind": "file", "path": "/h", "recursive": False, "count": 1,
        "version": 4, "v": 1,
    }
    assert all(e.node_id == f.node.id for e in events[2:])


def test_every_mutation_by_id(coord: Coordinator, ns: str) -> None:
    d = coord.mkdir(ns, "/d").node
    f = coord.create_file(ns, "/d/f", "a").node
    assert coord.write_file(ns, f.id, "b").node.path == "/d/f"
    assert coord.rename(ns, f.id, "g").node.path == "/d/g"
    assert coord.move(ns, f.id, "/g").node.path == "/g"
    assert coord.rename(ns, d.id, "e").node.path == "/e"
    assert coord.move(ns, d.id, "/g2").node.path == "/g2"
    assert coord.get(ns, f.id).content == "b"
    assert coord.delete(ns, f.id).node.id == f.id
    assert coord.delete(ns, d.id).node.path == "/g2"
    assert [n.path for n in coord.walk(ns)] == ["/"]


def test_stat_get_carry_content_and_listdir_does_not(coord: Coordinator, ns: str) -> None:
    f = coord.create_file(ns, "/f", "body", {"k": [1, 2]}).node
    assert coord.stat(ns, "/f").content == "body"
    assert coord.get(ns, f.id).content == "body"
    assert coord.get(ns, f.id).metadata == {"k": [1, 2]}
    assert coord.stat(ns, "/").path == "/" and coord.stat(ns, "/").parent_id is None
    listed = coord.listdir(ns, "/")[0]
    assert listed.id == f.id and listed.content is None
    assert listed.created_at is not None and listed.updated_at is not None


def test_errors_by_path_and_by_id(coord: Coordinator, ns: str) -> None:
    d = coord.mkdir(ns, "/d").node
    f = coord.create_file(ns, "/d/f").node
    coord.mkdir(ns, "/d/e")
    root = coord.stat(ns, "/").id
    before = db_state(coord, ns)
    for ref_d, ref_f, ref_root in (("/d", "/d/f", "/"), (d.id, f.id, root)):
        with pytest.raises(DirectoryNotEmpty):
            coord.delete(ns, ref_d)
        with pytest.raises(IsADirectory):
            coord.write_file(ns, ref_d, "x")
        with pytest.raises(AlreadyExists):
            coord.rename(ns, ref_f, "e")
        with pytest.raises(AlreadyExists):
            coord.move(ns, ref_f, "/d/e")
        with pytest.raises(InvalidMove):
            coord.move(ns, ref_d, "/d/e/d")
        with pytest.raises(InvalidMove):
            coord.rename(ns, ref_root, "x")
        with pytest.raises(NotADirectory):
            coord.listdir(ns, ref_f)
        with pytest.raises(Conflict):
            coord.write_file(ns, ref_f, "x", if_version=7)
    with pytest.raises(NotFound):
        coord.get(ns, "00000000-0000-0000-0000-000000000000")
    with pytest.raises(AlreadyExists):
        coord.mkdir(ns, "/d")
    with pytest.raises(AlreadyExists):
        coord.create_file(ns, "/d/f")
    assert db_state(coord, ns) == before
    assert all(issubclass(e, CoordinatorError) for e in (NotFound, Conflict, TooLarge))
    assert len({NotFound.code, AlreadyExists.code, Conflict.code, InvalidMove.code}) == 4


def test_if_version(coord: Coordinator, ns: str) -> None:
    f = coord.create_file(ns, "/f", "a").node
    d = coord.mkdir(ns, "/d").node
    stale = f.version
    w = coord.write_file(ns, "/f", "b", if_version=stale)
    before = db_state(coord, ns)
    calls: list[Callable[[], object]] = [
        lambda: coord.write_file(ns, "/f", "c", if_version=stale),
        lambda: coord.write_file(ns, f.id, "c", if_version=stale),
        lambda: coord.rename(ns, "/f", "g", if_version=stale),
        lambda: coord.rename(ns, f.id, "g", if_version=stale),
        lambda: coord.move(ns, "/f", "/d/f", if_version=stale),
        lambda: coord.move(ns, f.id, "/d/f", if_version=stale),
        lambda: coord.delete(ns, "/f", if_version=stale),
        lambda: coord.delete(ns, f.id, if_version=stale),
        lambda: coord.rename(ns, "/d", "e", if_version=d.version + 1),
    ]
    for call in calls:
        with pytest.raises(Conflict):
            call()
    assert db_state(coord, ns) == before
    v = w.node.version
    v = coord.rename(ns, f.id, "g", if_version=v).node.version
    v = coord.move(ns, "/g", "/d/g", if_version=v).node.version
    coord.delete(ns, "/d/g", if_version=v)
    coord.rename(ns, "/d", "e", if_version=d.version)


def test_namespaces(coord: Coordinator) -> None:
    assert coord.namespaces() == []
    r = coord.create_namespace("b-1")
    assert r.node.path == "/" and r.node.kind == "dir" and r.seq is not None
    coord.create_namespace("a.x_2")
    assert coord.namespaces() == ["a.x_2", "b-1"]
    with pytest.raises(AlreadyExists):
        coord.create_namespace("b-1")
    # Same paths in two namespaces are independent.
    coord.mkdir("b-1", "/d")
    coord.mkdir("a.x_2", "/d")
    coord.create_file("b-1", "/d/f", "b")
    with pytest.raises(NotFound):
        coord.stat("a.x_2", "/d/f")
    # Dropping: refused when not empty, unless forced.
    with pytest.raises(DirectoryNotEmpty):
        coord.drop_namespace("b-1")
    assert coord.stat("b-1", "/d/f").content == "b"
    dropped = coord.drop_namespace("b-1", force=True)
    assert dropped.node.path == "/"
    assert coord.namespaces() == ["a.x_2"]
    with pytest.raises(NotFound):
        coord.stat("b-1", "/")
    with pytest.raises(NotFound):
        coord.drop_namespace("b-1")
    coord.delete("a.x_2", "/d")
    coord.drop_namespace("a.x_2")  # empty: no force needed
    assert coord.namespaces() == []
    types = [(e.namespace, e.type, e.payload.get("count")) for e in coord.read_events(wait=5)[0]]
    assert ("b-1", "namespace_dropped", 3) in types  # root, /d, /d/f
    assert ("a.x_2", "namespace_dropped", 1) in types
    with coord.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM nodes")).scalar_one() == 0
    # A dropped name can be created again, empty.
    coord.create_namespace("b-1")
    assert [n.path for n in coord.walk("b-1")] == ["/"]


def test_mkdir_parents(coord: Coordinator, ns: str) -> None:
    r = coord.mkdir(ns, "/a/b/c", parents=True)
    assert r.node.path == "/a/b/c" and r.seq is not None
    events, _ = coord.read_events(wait=5.0)
    created = [e for e in events if e.type == "created"]
    assert [e.payload["path"] for e in created] == ["/a", "/a/b", "/a/b/c"]
    assert len({e.transaction_block for e in created}) == 1  # one transaction
    again = coord.mkdir(ns, "/a/b/c", parents=True)
    assert again.seq is None and again.node.id == r.node.id  # nothing to do, nothing logged
    assert coord.mkdir(ns, "/a/b/c/d", parents=True).node.path == "/a/b/c/d"
    with pytest.raises(AlreadyExists):
        coord.mkdir(ns, "/a/b/c")  # without parents an existing directory is an error
    with pytest.raises(NotFound):
        coord.mkdir(ns, "/x/y")


def test_write_file_metadata(coord: Coordinator, ns: str) -> None:
    coord.create_file(ns, "/f", "a", {"a": 1, "nested": {"x": [1, "ü"]}})
    n = coord.write_file(ns, "/f", "b").node  # None keeps the metadata
    assert n.metadata == {"a": 1, "nested": {"x": [1, "ü"]}}
    n = coord.write_file(ns, "/f", "c", {"b": 2}).node  # a dict replaces it
    assert n.metadata == {"b": 2}
    n = coord.write_file(ns, "/f", "d", {}).node  # an empty dict clears it
    assert n.metadata == {} and coord.stat(ns, "/f").metadata == {}
    assert coord.create_file(ns, "/g").node.metadata == {}
    events, _ = coord.read_events(wait=5.0)
    written = [e.payload for e in events if e.type == "written"]
    assert [(p["content"], p["metadata"], p["version"]) for p in written] == [
        ("b", {"a": 1, "nested": {"x": [1, "ü"]}}, 2), ("c", {"b": 2}, 3), ("d", {}, 4)
    ]


def test_listdir_paging(coord: Coordinator, ns: str) -> None:
    names = ["b", "a", "B", "é", "a-b", "a.b", "z", "0", "ab"]
    for i, name in enumerate(names):
        (coord.mkdir if i % 2 else coord.create_file)(ns, f"/{name}")
    coord.create_file(ns, "/a/inner")  # not a child of the root
    expected = sorted(names, key=lambda s: s.encode())
    assert [n.name for n in coord.listdir(ns, "/")] == expected
    pages: list[str] = []
    after = None
    while True:
        page = coord.listdir(ns, "/", after=after, limit=2)
        if not page:
            break
        assert len(page) <= 2
        pages += [n.name for n in page]
        after = page[-1].name
    assert pages == expected
    assert [n.path for n in coord.listdir(ns, "/a")] == ["/a/inner"]
    assert coord.listdir(ns, "/", limit=0) == []


def test_walk_order_and_streaming(coord: Coordinator, ns: str) -> None:
    coord.mkdir(ns, "/a/b", parents=True)
    coord.mkdir(ns, "/a-b")
    coord.create_file(ns, "/a/b/f", "x")
    for i in range(40):
        coord.create_file(ns, f"/a/n{i:02}")
    walked = list(coord.walk(ns, batch=7))
    paths = [n.path for n in walked]
    assert paths == sorted(paths, key=lambda p: p.encode())  # byte order of the full path
    assert len(paths) == len(set(paths)) == 1 + 3 + 1 + 40
    seen: set[str] = set()
    by_id = {n.id: n for n in walked}
    for n in walked:  # a parent always comes before its children
        assert n.parent_id is None or by_id[n.parent_id].path in seen
        seen.add(n.path)
    assert by_id[coord.stat(ns, "/a/b/f").id].content == "x"
    assert [n.path for n in coord.walk(ns, "/a/b")] == ["/a/b", "/a/b/f"]
    assert [n.path for n in coord.walk(ns, "/a/b/f")] == ["/a/b/f"]
    # Streamed: the first node arrives before the walk is consumed, and stopping early
    # gives the pooled connection back.
    it = cast(Generator[Node, None, None], coord.walk(ns, batch=5))
    assert next(it).path == "/"
    checked_out = coord.engine.pool.checkedout()  # type: ignore[attr-defined]
    assert checked_out >= 1
    it.close()
    assert coord.engine.pool.checkedout() == checked_out - 1  # type: ignore[attr-defined]


def test_walk_is_one_snapshot(coord: Coordinator, ns: str) -> None:
    for i in range(30):
        coord.mkdir(ns, f"/d{i:02}")
    it = coord.walk(ns, batch=3)
    first = [next(it) for _ in range(3)]
    coord.delete(ns, "/d29")
    coord.mkdir(ns, "/zz")
    rest = list(it)
    paths = [n.path for n in first + rest]
    assert "/d29" in paths and "/zz" not in paths and len(paths) == 31


def test_delete_recursive(coord: Coordinator, ns: str) -> None:
    coord.mkdir(ns, "/a/b/c", parents=True)
    coord.create_file(ns, "/a/b/c/f")
    coord.create_file(ns, "/a/g")
    r = coord.delete(ns, "/a", recursive=True)
    assert r.node.path == "/a"
    events, _ = coord.read_events(wait=5.0)
    assert events[-1].payload["count"] == 5 and events[-1].payload["recursive"] is True
    assert [n.path for n in coord.walk(ns)] == ["/"]
    coord.mkdir(ns, "/empty")
    coord.delete(ns, "/empty")  # an empty directory needs no recursive


def test_groups(coord: Coordinator, ns: str) -> None:
    with coord.transaction(ns) as g:
        assert g.namespace == ns
        g.mkdir("/a")
        f = g.create_file("/a/f", "x")
        assert g.stat("/a/f").content == "x" and g.get(f.node.id).path == "/a/f"
        g.write_file("/a/f", "y")
        g.rename("/a", "b")
        assert [n.name for n in g.listdir("/b")] == ["f"]
        g.move("/b/f", "/f")
        g.delete("/b")
    assert [e.node.path for e in g.results] == ["/a", "/a/f", "/a/f", "/b", "/f", "/b"]
    seqs = [r.seq for r in g.results]
    assert seqs == list(range(seqs[0] or 0, (seqs[0] or 0) + 6))  # one block, in order
    assert coord.stat(ns, "/f").content == "y"
    # An exception rolls the whole group back.
    before = db_state(coord, ns)
    with pytest.raises(NotFound), coord.transaction(ns) as g:
        g.mkdir("/x")
        g.delete("/nope")
    assert db_state(coord, ns) == before
    # apply: a list of operations, atomic, with results.
    res = coord.apply(ns, [Mkdir("/p"), CreateFile("/p/q", "c"),
                           Rename("/p", "r")])
    assert [r.node.path for r in res] == ["/p", "/p/q", "/r"]
    with pytest.raises(AlreadyExists):
        coord.apply(ns, [Mkdir("/s"), Mkdir("/r")])
    with pytest.raises(NotFound):
        coord.stat(ns, "/s")


def test_group_size_limit(database_url: str) -> None:
    with Coordinator.connect(database_url, max_group_ops=3) as coord:
        coord.create_namespace("t")
        ops = [Mkdir(f"/d{i}") for i in range(4)]
        with pytest.raises(TooLarge):
            coord.apply("t", ops)
        with pytest.raises(TooLarge), coord.transaction("t") as g:
            for i in range(4):
                g.mkdir(f"/e{i}")
        assert [n.path for n in coord.walk("t")] == ["/"]
        coord.apply("t", ops[:3])


def test_unreachable_database_is_unavailable() -> None:
    url = f"postgresql://nobody@127.0.0.1:{free_port()}/nothing"
    with Coordinator.connect(url, connect_timeout=1.0) as coord:
        with pytest.raises(Unavailable):
            coord.mkdir("t", "/a")
        with pytest.raises(Unavailable):
            coord.read_events(wait=0.1)
        with pytest.raises(Unavailable):
            coord.namespaces()


def test_sqlalchemy_url_form(database_url: str) -> None:
    url = database_url.replace("postgresql://", "postgresql+psycopg://")
    with Coordinator.connect(url) as coord:
        coord.create_namespace("t")
        assert coord.namespaces() == ["t"]


def test_group_that_caught_a_database_error_cannot_commit(coord: Coordinator, ns: str) -> None:
    """A step that failed inside the database (AlreadyExists from the unique key) aborts
    the transaction. A block that catches the error and carries on must not look
    committed: the next step, or the end of the block, raises, and nothing is written."""
    coord.mkdir(ns, "/taken")
    before = db_state(coord, ns)
    with pytest.raises(AlreadyExists) as info, coord.transaction(ns) as g:
        g.mkdir("/first")
        with pytest.raises(AlreadyExists):
            g.mkdir("/taken")
    assert "rolled back" in str(info.value)
    with pytest.raises(AlreadyExists), coord.transaction(ns) as g:
        g.mkdir("/first")
        try:
            g.create_file("/taken")
        except AlreadyExists:
            pass
        g.mkdir("/second")  # refused at once: the transaction is already aborted
    assert db_state(coord, ns) == before
    # Any failed step aborts the group, even one found before touching the database
    # (NotFound from a lookup): one rule, all or nothing.
    with pytest.raises(NotFound), coord.transaction(ns) as g:
        g.mkdir("/first")
        with pytest.raises(NotFound):
            g.rename("/missing", "x")
    assert db_state(coord, ns) == before


def test_lock_timeout_inside_a_group_is_a_conflict(coord: Coordinator, database_url: str) -> None:
    coord.create_namespace("t")
    coord.mkdir("t", "/a")
    with Coordinator.connect(database_url, lock_timeout=0.3) as impatient:
        with coord.transaction("t") as holder:
            holder.rename("/a", "a2")
            with pytest.raises(Conflict), impatient.transaction("t") as g:
                g.mkdir("/b")
                with pytest.raises(Conflict):  # typed inside the block, not a driver error
                    g.create_file("/a/f")
    assert [n.name for n in coord.listdir("t", "/")] == ["a2"]


def test_set_metadata(coord: Coordinator, ns: str) -> None:
    d = coord.mkdir(ns, "/d")
    f = coord.create_file(ns, "/d/f", "body", {"lang": "en"})
    # A directory gets metadata too; content, name and place stay.
    md = coord.set_metadata(ns, "/d", {"owner": "bill"})
    assert (md.node.metadata, md.node.version, md.node.path) == ({"owner": "bill"}, 2, "/d")
    # Replaced, not merged; by id as by path; the version is a compare-and-swap.
    mf = coord.set_metadata(ns, f.node.id, {"tags": ["a"]}, if_version=1)
    assert (mf.node.metadata, mf.node.content, mf.node.version) == ({"tags": ["a"]}, None, 2)
    assert coord.get(ns, f.node.id).content == "body"
    with pytest.raises(Conflict):
        coord.set_metadata(ns, "/d/f", {"x": 1}, if_version=1)
    with pytest.raises(NotFound):
        coord.set_metadata(ns, "/nope", {})
    with pytest.raises(InvalidArgument):
        coord.set_metadata(ns, "/", {"x": 1})
    assert coord.stat(ns, "/d/f").metadata == {"tags": ["a"]}
    # One event each, carrying the metadata as it is after the change.
    events, _ = coord.read_events(wait=5.0)
    mine = [e for e in events if e.type == "metadata_set"]
    assert [e.position for e in mine] == [md.seq, mf.seq]
    assert mine[1].payload == {
        "id": f.node.id, "path": "/d/f", "metadata": {"tags": ["a"]}, "version": 2, "v": 1,
    }
    assert mine[1].change == MetadataSet(
        id=f.node.id, path="/d/f", metadata={"tags": ["a"]}, version=2
    )
    # In a group, as a command.
    results = coord.apply(ns, [SetMetadata("/d", {}), Rename("/d", "e")])
    assert [r.node.metadata for r in results] == [{}, {}]
    with coord.transaction(ns) as group:
        group.set_metadata("/e/f", {"n": 1})
        group.set_metadata("/e", {"n": 2})
    assert coord.stat(ns, "/e").metadata == {"n": 2} and d.node.id == coord.stat(ns, "/e").id
