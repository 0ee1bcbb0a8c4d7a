"""A copy's ``created`` events reach the index as any create's: the worker indexes
every copy with its full path, and a replay of the log alone builds the same index
(no change to the indexer or to replay was needed for the new command)."""

from __future__ import annotations

from indexer_support import assert_index_matches, index_docs, running_worker

from coordinator import Coordinator, Copy, Rename
from coordinator.indexing import consumer_for
from indexer.replay import rebuild
from indexer.search_engine import SearchEngine


def test_copies_are_indexed_with_their_paths_and_replay_agrees(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    coord.create_namespace("cp")
    coord.mkdir("cp", "/src/sub", parents=True)
    coord.create_file("cp", "/src/f", "one", {"k": "v"})
    coord.create_file("cp", "/src/sub/g", "two")
    coord.mkdir("cp", "/dst")
    with running_worker(database_url, es_url, alias):
        file_copy = coord.copy("cp", "/src/f", "/dst", "f2")
        tree_copy = coord.copy("cp", "/src", "/dst")
        # In a group, renamed in the same transaction: the index has the final path.
        grouped = coord.apply("cp", [Copy("/src/sub", "/"), Rename("/sub", "sub2")])
        last = grouped[-1].seq
        assert last is not None and tree_copy.seq is not None and file_copy.seq is not None
        assert coord.wait_indexed(last, 30, consumer=consumer_for(alias))
        docs = index_docs(es, alias, "cp")
        paths = {d["path"] for d in docs.values()}
        assert {"/dst/f2", "/dst/src", "/dst/src/f", "/dst/src/sub", "/dst/src/sub/g",
                "/sub2", "/sub2/g"} <= paths
        assert docs[file_copy.node.id]["content"] == "one"
        assert docs[file_copy.node.id]["metadata"] == {"k": "v"}
        assert assert_index_matches(coord, es, alias) == len(list(coord.walk("cp"))) - 1
        live = index_docs(es, alias, "cp")
    result = rebuild(coord, es, source="events", alias=alias)
    assert result.swapped
    rebuilt = index_docs(es, alias, "cp")
    strip = {k: {f: v for f, v in d.items() if f != "seq"} for k, d in live.items()}
    assert {k: {f: v for f, v in d.items() if f != "seq"} for k, d in rebuilt.items()} == strip
