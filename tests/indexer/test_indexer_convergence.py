"""The index converges to exactly what PostgreSQL holds, whatever the interleaving."""

from __future__ import annotations

from indexer_support import (
    assert_index_matches,
    run_clients,
    run_once,
    running_worker,
)

from coordinator import Coordinator
from coordinator.event_appender import EventAppender
from coordinator.indexing import consumer_for
from coordinator.tree import TreeTx
from indexer.search_engine import SearchEngine
from pathkeeper.local.bulk_tree import bulk_subtree


def test_concurrent_random_clients_converge(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    namespaces = ["alpha", "beta", "gamma"]
    for ns in namespaces:
        coord.create_namespace(ns)
        coord.mkdir(ns, "/a/b", parents=True)
        coord.mkdir(ns, "/c")
    with running_worker(database_url, es_url, alias, partitions=2, batch_events=50):
        done = run_clients(coord, namespaces, clients=6, seconds=4.0, at_least=101)
        assert done > 100, "the workload barely ran"
        checked = assert_index_matches(coord, es, alias)
    assert checked > 5


def test_same_batch_move_then_delete_and_dropped_namespaces(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    """Changes that reach the worker in ONE batch: a subtree moved and then deleted
    (its documents still carry the old path), a namespace dropped and recreated."""
    for ns in ("keep", "drop"):
        coord.create_namespace(ns)
        coord.mkdir(ns, "/x/y/z", parents=True)
        for i in range(5):
            coord.create_file(ns, f"/x/y/z/f{i}", f"{ns} {i}")
    run_once(database_url, es_url, alias)
    assert_index_matches(coord, es, alias)
    # One batch: move /x -> /moved, then delete it; move /x2 up and /x2/y away.
    coord.move("keep", "/x", "/moved")
    coord.mkdir("keep", "/x2/y", parents=True)
    coord.create_file("keep", "/x2/y/g", "g")
    coord.delete("keep", "/moved", recursive=True)
    coord.rename("keep", "/x2", "x3")
    coord.move("keep", "/x3/y", "/y-top")
    coord.drop_namespace("drop", force=True)
    coord.create_namespace("drop")
    coord.create_file("drop", "/fresh", "new life")
    run_once(database_url, es_url, alias)
    assert assert_index_matches(coord, es, alias) == 4  # /x3 /y-top /y-top/g /fresh


def test_gap_a_transaction_that_took_its_position_first_and_commits_last(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    coord.create_namespace("g")
    consumer = consumer_for(alias)
    with running_worker(database_url, es_url, alias, partitions=1, read_wait=0.2):
        # The coordinator takes a transaction's positions as its last statement before
        # COMMIT; do the same by hand, then hold the transaction open before COMMIT.
        with coord.engine.begin() as conn:
            appender = EventAppender(conn)
            first = TreeTx(conn, "g", appender).create_file("/first", "took its position first")
            appender.flush()
            assert first.seq is not None
            # Commits while /first's transaction is still open: a later position.
            second = coord.create_file("g", "/second", "committed first")
            assert second.seq is not None and second.seq > first.seq
            # The worker must not move past the open transaction's position.
            assert not coord.wait_indexed(second.seq, 1.0, consumer=consumer)
            assert not es.exists(index=alias, id=second.node.id, routing="g")
        assert coord.wait_indexed(second.seq, 30, consumer=consumer)
        assert es.get(index=alias, id=first.node.id, routing="g")["_source"]["path"] == "/first"
        assert_index_matches(coord, es, alias)


def test_directory_rename_with_many_descendants_streams(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    coord.create_namespace("big")
    coord.mkdir("big", "/home")
    _, count = bulk_subtree(coord, "big", "/home", "tree", dirs=10, files_per_dir=199)
    run_once(database_url, es_url, alias)
    coord.rename("big", "/home", "house")
    with running_worker(database_url, es_url, alias, partitions=2, chunk_size=300):
        n = assert_index_matches(coord, es, alias)
    assert n == count + 1
