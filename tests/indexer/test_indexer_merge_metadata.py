"""A merge's ``metadata_set`` event reaches the index as any metadata write's: the
worker indexes the merged metadata, and a replay of the log alone builds the same index
(no change to the indexer or to replay was needed for the new command)."""

from __future__ import annotations

from indexer_support import assert_index_matches, index_docs, running_worker

from coordinator import Coordinator, MergeMetadata, Rename
from coordinator.indexing import consumer_for
from indexer.replay import rebuild
from indexer.search_engine import SearchEngine


def test_merged_metadata_is_indexed_and_replay_agrees(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    coord.create_namespace("mm")
    coord.mkdir("mm", "/d")
    f = coord.create_file("mm", "/d/f", "body", {"owner": "ann", "old": 1})
    with running_worker(database_url, es_url, alias):
        coord.merge_metadata("mm", "/d/f", {"old": None, "tags": ["a"]})
        coord.merge_metadata("mm", "/d", {"team": "x"})
        grouped = coord.apply("mm", [MergeMetadata(f.node.id, {"tags": ["a", "b"]}),
                                     Rename("/d", "e")])
        last = grouped[-1].seq
        assert last is not None
        assert coord.wait_indexed(last, 30, consumer=consumer_for(alias))
        docs = index_docs(es, alias, "mm")
        assert docs[f.node.id]["metadata"] == {"owner": "ann", "tags": ["a", "b"]}
        assert docs[f.node.id]["path"] == "/e/f"
        assert docs[coord.stat("mm", "/e").id]["metadata"] == {"team": "x"}
        assert assert_index_matches(coord, es, alias) == len(list(coord.walk("mm"))) - 1
        live = index_docs(es, alias, "mm")
    result = rebuild(coord, es, source="events", alias=alias)
    assert result.swapped
    rebuilt = index_docs(es, alias, "mm")
    strip = {k: {f: v for f, v in d.items() if f != "seq"} for k, d in live.items()}
    assert {k: {f: v for f, v in d.items() if f != "seq"} for k, d in rebuilt.items()} == strip
