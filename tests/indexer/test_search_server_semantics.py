"""What the indexer relies on from Elasticsearch, checked against the real server.

Each test here guards a place where the stand-in (noida-db) behaves differently;
README.md ("Real Elasticsearch, and where the stand-in differs") lists them.
"""

from __future__ import annotations

import os

import pytest
from indexer_support import assert_index_matches, running_worker

from coordinator import Coordinator
from coordinator.indexing import consumer_for
from indexer import contract, elasticsearch_index
from indexer.bulk import Rejected, send
from indexer.contract import delete_action, index_action
from indexer.replay import rebuild
from indexer.search_engine import SearchEngine
from indexer.worker import Worker, WorkerConfig
from pathkeeper.local.search import search_kind

ON_NOIDA = search_kind() == "noida" and not os.environ.get("ES_URL")


def _no_reject(r: Rejected) -> None:
    raise AssertionError(f"rejected: {r}")


@pytest.mark.skipif(ON_NOIDA, reason="noida-db forgets delete tombstones at once")
def test_a_delete_tombstone_rejects_a_late_older_write(
    coord: Coordinator, es: SearchEngine, alias: str, ns: str
) -> None:
    """A worker that lost its lease may still send a batch older than the delete its
    successor wrote; the tombstone (kept for ``index.gc_deletes``) turns it into a
    version conflict, which the indexer counts as already applied."""
    index = elasticsearch_index.ensure_alias(es, alias)
    node = coord.create_file(ns, "/f", "x").node
    assert send(es, [index_action(alias, node, 5)], _no_reject).indexed == 1
    assert send(es, [delete_action(alias, ns, node.id, 10)], _no_reject).deleted == 1
    late = send(es, [index_action(alias, node, 7)], _no_reject)
    assert (late.indexed, late.already_newer) == (0, 1)
    es.refresh(index)
    assert not es.exists(index=alias, id=node.id, routing=ns)
    # A newer write is a legitimate re-create and goes through.
    assert send(es, [index_action(alias, node, 11)], _no_reject).indexed == 1


def test_subtree_search_is_by_directory_not_by_string_prefix(
    coord: Coordinator, es: SearchEngine, alias: str, ns: str, database_url: str, es_url: str
) -> None:
    coord.mkdir(ns, "/a/b", parents=True)
    coord.create_file(ns, "/a/b/f", "x")
    coord.create_file(ns, "/ab", "y")  # "/a" is a string prefix of "/ab", not its parent
    last = coord.create_file(ns, "/a-b", "z")
    with running_worker(database_url, es_url, alias):
        assert last.seq is not None
        assert coord.wait_indexed(last.seq, 30, consumer=consumer_for(alias))
        es.refresh(alias)

        def under(path: str) -> set[str]:
            clause = contract.subtree_filter(path)
            filters = [{"term": {"namespace": ns}}] + ([clause] if clause else [])
            hits = es.search(alias, {"size": 100, "query": {"bool": {"filter": filters}}},
                             routing=ns)["hits"]["hits"]
            return {h["_source"]["path"] for h in hits}

        assert under("/a") == {"/a", "/a/b", "/a/b/f"}
        assert under("/a/b/f") == {"/a/b/f"}
        assert under("/") == {"/a", "/a/b", "/a/b/f", "/ab", "/a-b"}
        assert under("/nothing") == set()


def test_an_index_of_an_older_mapping_is_refused_then_moved_over_by_reindex(
    coord: Coordinator, es: SearchEngine, alias: str, ns: str, database_url: str, es_url: str
) -> None:
    """An index created before the ``tree`` field existed would dead-letter every
    write (the mapping is strict): the worker refuses to start and names the command
    that moves it over; ``reindex`` does, and the worker then runs."""
    old = contract.concrete_name(alias, 1)
    legacy = {k: v for k, v in contract.MAPPINGS["properties"].items() if k != contract.TREE_FIELD}
    es.create_index(old, settings=contract.index_settings(),
                      mappings={"dynamic": "strict", "properties": legacy})
    es.update_aliases([{"add": {"index": old, "alias": alias,
                                                "is_write_index": True}}])
    coord.mkdir(ns, "/d")
    last = coord.create_file(ns, "/d/f", "x")
    config = WorkerConfig(database_url=database_url, es_url=es_url, alias=alias, once=True)
    with pytest.raises(elasticsearch_index.MappingOutdated, match="pathkeeper reindex"):
        Worker(config).run()
    result = rebuild(coord, es, source="snapshot", alias=alias)
    assert result.swapped and result.index != old
    elasticsearch_index.check_mapping(es, result.index, alias)
    assert last.seq is not None
    with running_worker(database_url, es_url, alias):
        coord.rename(ns, "/d", "e")
        assert assert_index_matches(coord, es, alias) == 2
