"""``merge_metadata``: a node's metadata updated key by key (a key set to null removed, the
others kept), in one statement alone and as a step of a group, on real PostgreSQL: the
result, its ``metadata_set`` event, the refusals (worded as ``set_metadata`` words them),
and concurrent merges of different keys that all survive (where read-then-set loses
all but one).

The command is declared once (``coordinator.commands.MergeMetadata``: its function, its
arguments, its event, its route); nothing else in the coordinator names it."""

from __future__ import annotations

import threading
from functools import partial

import pytest
from tree_checks import at_barrier, check_tree, outcome, run_threads

from coordinator import (
    Conflict,
    Coordinator,
    CreateFile,
    InvalidArgument,
    InvalidContent,
    MergeMetadata,
    Mkdir,
    NotADirectory,
    NotFound,
    Rename,
    SetMetadata,
)
from coordinator.events import MetadataSet
from coordinator.single_statement import function_logged_sql, lone


def _events(coord: Coordinator, ns: str, after: int) -> list[tuple[str, object]]:
    events, _ = coord.read_events(after=after, limit=1000)
    return [(e.type, e.payload["metadata"]) for e in events if e.namespace == ns]


def test_merge_replaces_the_keys_it_names_removes_nulls_and_keeps_the_rest(
    coord: Coordinator, ns: str
) -> None:
    coord.mkdir(ns, "/d")
    f = coord.create_file(ns, "/d/f", "body", {"owner": "ann", "tags": ["a"], "old": 1})
    merged = coord.merge_metadata(ns, "/d/f", {"tags": ["a", "b"], "old": None, "new": {"x": 1}})
    assert merged.node.metadata == {"owner": "ann", "tags": ["a", "b"], "new": {"x": 1}}
    assert merged.node.version == 2 and merged.node.content is None
    assert coord.stat(ns, "/d/f").content == "body"
    assert coord.stat(ns, "/d/f").metadata == merged.node.metadata
    # By id, a nested object is replaced whole (top level only).
    again = coord.merge_metadata(ns, f.node.id, {"new": {"y": 2}}, if_version=2)
    assert again.node.metadata == {"owner": "ann", "tags": ["a", "b"], "new": {"y": 2}}
    assert again.node.path == "/d/f"
    # A directory has metadata too; an empty patch changes nothing but the version.
    d = coord.merge_metadata(ns, "/d", {})
    assert (d.node.metadata, d.node.version) == ({}, 2)
    assert f.seq is not None
    assert _events(coord, ns, f.seq) == [
        ("metadata_set", {"owner": "ann", "tags": ["a", "b"], "new": {"x": 1}}),
        ("metadata_set", {"owner": "ann", "tags": ["a", "b"], "new": {"y": 2}}),
        ("metadata_set", {}),
    ]
    check_tree(coord, ns)


def test_alone_it_is_one_statement_and_grouped_it_logs_the_same(
    coord: Coordinator, ns: str
) -> None:
    statement = lone(ns, MergeMetadata("/f", {"k": 1}), coord.settings)
    assert statement is not None
    assert statement.sql == function_logged_sql(MergeMetadata.function)
    assert "pathkeeper_merge_metadata(" in statement.sql
    coord.create_file(ns, "/f", "", {"a": 1})
    coord.create_file(ns, "/g", "", {"a": 1})
    start = coord.stat(ns, "/f").version
    alone = [coord.merge_metadata(ns, "/f", {"b": 2}), coord.merge_metadata(ns, "/f", {"a": None})]
    grouped = coord.apply(ns, [MergeMetadata("/g", {"b": 2}), MergeMetadata("/g", {"a": None})])
    assert [r.node.metadata for r in alone] == [r.node.metadata for r in grouped] == [
        {"a": 1, "b": 2}, {"b": 2}]
    assert [r.node.version for r in grouped] == [start + 1, start + 2]
    with coord.transaction(ns) as tx:
        tx.set_metadata("/g", {"z": 0})
        step = tx.merge_metadata("/g", {"y": 1})
    assert step.node.metadata == {"z": 0, "y": 1}
    events, _ = coord.read_events(after=0, limit=1000)
    changes = [e.change for e in events if e.type == "metadata_set"]
    assert all(isinstance(c, MetadataSet) for c in changes)
    assert [c.metadata for c in changes if c.path == "/f"] == [{"a": 1, "b": 2}, {"b": 2}]
    assert [c.metadata for c in changes if c.path == "/g"] == [
        {"a": 1, "b": 2}, {"b": 2}, {"z": 0}, {"z": 0, "y": 1}]


def test_refusals_are_set_metadatas_and_write_nothing(coord: Coordinator, ns: str) -> None:
    coord.create_file(ns, "/f", "", {"k": 1})
    before = coord.stat(ns, "/f")
    cursor = coord.read_events(after=0, limit=1000)[1]
    for patch_call, merge_call, error in [
        (SetMetadata("/", {}), MergeMetadata("/", {}), InvalidArgument),
        (SetMetadata("/f", {}, 7), MergeMetadata("/f", {}, 7), Conflict),
        (SetMetadata("/nope", {}), MergeMetadata("/nope", {}), NotFound),
        (SetMetadata("/f/x", {}), MergeMetadata("/f/x", {}), NotADirectory),
    ]:
        with pytest.raises(error) as expected:
            coord.execute(ns, patch_call)
        with pytest.raises(error) as alone:
            coord.execute(ns, merge_call)
        with pytest.raises(error) as grouped:
            coord.apply(ns, [merge_call])
        assert str(alone.value) == str(grouped.value) == str(expected.value)
    with pytest.raises(InvalidContent):
        coord.merge_metadata(ns, "/f", {"k": "nul\x00"})
    assert coord.stat(ns, "/f") == before
    assert coord.read_events(after=cursor, limit=1000)[0] == []


def test_concurrent_merges_of_different_keys_all_survive(coord: Coordinator, ns: str) -> None:
    """Eight clients, each its own connection, merge a key each into one node at once:
    the node's lock orders them, and each merges what the one before wrote."""
    coord.create_file(ns, "/f", "", {"base": True})
    n = 8
    barrier = threading.Barrier(n)
    results = run_threads([
        at_barrier(barrier, coord.merge_metadata, ns, "/f", {f"k{i}": i}) for i in range(n)
    ])
    node = coord.stat(ns, "/f")
    assert node.metadata == {"base": True, **{f"k{i}": i for i in range(n)}}
    assert node.version == 1 + n
    assert sorted(r.node.version for r in results) == list(range(2, 2 + n))


def test_a_merge_by_path_racing_a_swap_of_its_parent_merges_into_the_node_it_read(
    coord: Coordinator, ns: str
) -> None:
    """A merge by path while a group renames the parent away and creates a new node at
    the same path: the merge lands in one of the two, computed from that node's own
    metadata (the node is locked by path, then written by the locked row's id), never
    the old one's keys written into the new one. The window between the function's lock
    and its write is too short to reach on demand (a write by path passed these rounds
    too): this checks the outcomes a race can have; the write by id is what closes it."""
    for round_ in range(4):
        top = f"/p{round_}"
        coord.mkdir(ns, top)
        coord.create_file(ns, f"{top}/f", "", {"old": True})
        barrier = threading.Barrier(2)
        merge, _ = run_threads([
            at_barrier(barrier, outcome(partial(coord.merge_metadata, ns, f"{top}/f", {"m": 1}))),
            at_barrier(barrier, coord.apply, ns, [
                Rename(top, f"q{round_}"), Mkdir(top), CreateFile(f"{top}/f", "", {"new": True})]),
        ])
        old = coord.stat(ns, f"/q{round_}/f").metadata
        new = coord.stat(ns, f"{top}/f").metadata
        assert (old, new) in [({"old": True, "m": 1}, {"new": True}),
                              ({"old": True}, {"new": True, "m": 1})], (merge, old, new)
    check_tree(coord, ns)
