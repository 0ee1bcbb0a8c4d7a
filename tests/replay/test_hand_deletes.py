"""Documents deleted by hand with Elasticsearch's delete API are restored by
``verify --repair`` and ``reindex --namespace``; a legitimate delete is never undone.

A delete without a version leaves a tombstone one version above the document's, so
every write at the version the indexer would use (the same safe position, when the log
has not moved on) is refused with a version conflict although nothing is there.
"""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner

from coordinator import Coordinator
from indexer.bulk import resolve_conflicts, send
from indexer.contract import index_action
from indexer.live_nodes import node_exists
from indexer.replay import rebuild
from indexer.search_engine import SearchEngine, SearchNotFound
from pathkeeper.cli.main import main

from .conftest import RunningWorker, diff_summary, expected_index, index_docs


def _found(es: SearchEngine, alias: str, ns: str, node_id: str) -> bool:
    try:
        es.get(index=alias, id=node_id, routing=ns, realtime=True)
    except SearchNotFound:
        return False
    return True


def _cli(database_url: str, es_url: str, *args: str) -> Any:
    env = {"PATHKEEPER_DATABASE_URL": database_url, "PATHKEEPER_ES_URL": es_url}
    return CliRunner().invoke(main, list(args), env=env)


def test_repair_and_namespace_reindex_restore_documents_deleted_by_hand(
    coord: Coordinator, database_url: str, es_url: str, es: SearchEngine, alias: str,
    live_worker: RunningWorker,
) -> None:
    coord.create_namespace("d")
    by_repair = coord.create_file("d", "/by-repair", "one").node
    by_reindex = coord.create_file("d", "/by-reindex", "two").node
    live_worker.caught_up(coord)
    # Every document at the same safe position, and no later write to move it on: a
    # repair or a namespace reindex now writes at exactly the version the documents have.
    rebuild(coord, es, source="snapshot", alias=alias)

    es.delete(index=alias, id=by_repair.id, routing="d", refresh=True)
    fixed = _cli(database_url, es_url, "verify", "--alias", alias, "--repair", "-q")
    assert fixed.exit_code == 0, fixed.output
    assert "repaired 1; not repaired (" in fixed.output, fixed.output
    assert "a dead letter now): 0" in fixed.output, fixed.output
    assert _found(es, alias, "d", by_repair.id)

    es.delete(index=alias, id=by_reindex.id, routing="d", refresh=True)
    reindexed = _cli(database_url, es_url, "reindex", "--alias", alias, "--namespace", "d",
                     "-q")
    assert reindexed.exit_code == 0, reindexed.output
    # Written: the one deleted by hand (and the one repair restored: its version is
    # above its seq now, so it is rewritten by compare-and-swap, as an edited one is).
    assert "snapshot: wrote 2 documents" in reindexed.output, reindexed.output
    assert _found(es, alias, "d", by_reindex.id)

    actual, expected = index_docs(es, alias), expected_index(coord)
    assert actual == expected, diff_summary(actual, expected)
    clean = _cli(database_url, es_url, "verify", "--alias", alias, "-q")
    assert clean.exit_code == 0, clean.output
    # The restored documents still take the live worker's later changes.
    coord.write_file("d", by_repair.id, "changed")
    coord.rename("d", by_reindex.id, "renamed")
    live_worker.caught_up(coord)
    actual, expected = index_docs(es, alias), expected_index(coord)
    assert actual == expected, diff_summary(actual, expected)


def test_a_late_write_never_brings_back_a_legitimately_deleted_document(
    coord: Coordinator, es: SearchEngine, alias: str, live_worker: RunningWorker,
) -> None:
    """Against the tombstone of a real delete (the node is gone from PostgreSQL) a late
    write of the node's older state loses, as it always did; so does one for a node
    deleted by hand in Elasticsearch and then for real in PostgreSQL."""
    coord.create_namespace("g")
    gone = coord.create_file("g", "/gone", "x").node
    old_seq = live_worker.caught_up(coord)
    coord.delete("g", gone.id)
    live_worker.caught_up(coord)
    late = send(es, [index_action(alias, gone, old_seq)], lambda r: None)
    assert (late.indexed, late.overridden, late.already_newer) == (0, 0, 1)
    assert not _found(es, alias, "g", gone.id)

    twice = coord.create_file("g", "/twice", "y").node
    seq = live_worker.caught_up(coord)
    es.delete(index=alias, id=twice.id, routing="g", refresh=True)
    coord.delete("g", twice.id)
    live_worker.caught_up(coord)
    late = send(es, [index_action(alias, twice, seq)], lambda r: None)
    assert (late.indexed, late.overridden) == (0, 0)
    assert not _found(es, alias, "g", twice.id)


def test_a_node_deleted_while_its_document_is_written_back_stays_deleted(
    coord: Coordinator, es: SearchEngine, alias: str, live_worker: RunningWorker,
) -> None:
    """The window between looking the node up and writing its document back: the node
    is deleted for real there, and the worker indexes that delete, before the write.
    The write goes through (a create over the delete's tombstone) and is taken back."""
    coord.create_namespace("r")
    node = coord.create_file("r", "/f", "x").node
    seq = live_worker.caught_up(coord)
    es.delete(index=alias, id=node.id, routing="r", refresh=True)
    looks: list[bool] = []

    def alive(ns: str, node_id: str) -> bool:
        there = node_exists(coord.engine, ns, node_id)
        if not looks:  # the first look said alive; then the node goes, for real
            coord.delete(ns, node_id)
            live_worker.caught_up(coord)
        looks.append(there)
        return there

    assert resolve_conflicts(es, [index_action(alias, node, seq)], alive=alive) == [False]
    assert looks == [True, False]
    assert not _found(es, alias, "r", node.id)
    actual, expected = index_docs(es, alias), expected_index(coord)
    assert actual == expected, diff_summary(actual, expected)
