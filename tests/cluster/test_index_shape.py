"""The index's shape (shards, replicas, how many shards a namespace spreads over) comes
from the command line; with a namespace spread over several shards every document is
still addressed by (namespace, id), so the worker, verify (and its repair), reindex and
replay work on it as on the default shape, and a rebuild keeps the live index's shape
unless told otherwise. A shape the server would refuse is one line, exit 2."""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner
from indexer_support import assert_index_matches

from coordinator import Coordinator
from indexer.contract import IndexShape
from indexer.elasticsearch_index import alias_targets, live_shape
from indexer.search_engine import SearchEngine
from indexer.verify import verify_index
from pathkeeper.cli.main import main
from pathkeeper.local.bulk_tree import bulk_subtree


def _cli(database_url: str, es_url: str, *args: str) -> Any:
    env = {"PATHKEEPER_DATABASE_URL": database_url, "PATHKEEPER_ES_URL": es_url}
    return CliRunner().invoke(main, list(args), env=env)


def test_a_namespace_spread_over_shards_is_indexed_verified_and_rebuilt_alike(
    coord: Coordinator, database_url: str, es_url: str, es: SearchEngine, alias: str,
) -> None:
    for ns in ("a", "b", "c"):
        coord.create_namespace(ns)
        bulk_subtree(coord, ns, "/", "top", dirs=4, files_per_dir=25)
    ran = _cli(database_url, es_url, "indexer", "run", "--once", "--alias", alias,
               "--partitions", "2", "--shards", "4", "--namespace-shards", "2")
    assert ran.exit_code == 0, ran.output
    assert live_shape(es, alias) == IndexShape(shards=4, replicas=0, namespace_shards=2)
    # A namespace's search asks the two shards its documents are spread over, not all.
    asked = es.search(alias, {"query": {"term": {"namespace": "a"}}, "size": 0}, routing="a")
    assert asked["_shards"]["total"] == 2
    assert assert_index_matches(coord, es, alias) == 3 * (1 + 4 + 4 * 25)

    # Renames, moves and deletes reach the right shards.
    coord.rename("a", "/top/d0", "renamed")
    coord.move("b", "/top/d1", "/moved")
    coord.delete("c", "/top/d2", recursive=True)
    ran = _cli(database_url, es_url, "indexer", "run", "--once", "--alias", alias,
               "--partitions", "2")
    assert ran.exit_code == 0, ran.output
    assert_index_matches(coord, es, alias)
    assert not verify_index(coord, es, alias=alias).drift

    # verify finds a document deleted by hand and its repair writes it where it belongs.
    gone = coord.stat("b", "/moved/f3")
    es.delete(index=alias, id=gone.id, routing="b", refresh=True)
    found = verify_index(coord, es, alias=alias, repair_drift=True)
    assert [(d.kind, d.node_id) for d in found.drift] == [("missing", gone.id)], found
    assert found.repaired == 1
    assert not verify_index(coord, es, alias=alias).drift

    # reindex keeps the live shape; replay changes only what it is told to.
    before = alias_targets(es, alias)
    ran = _cli(database_url, es_url, "reindex", "--alias", alias, "-q")
    assert ran.exit_code == 0, ran.output
    assert alias_targets(es, alias) != before
    assert live_shape(es, alias) == IndexShape(shards=4, replicas=0, namespace_shards=2)
    assert_index_matches(coord, es, alias)
    ran = _cli(database_url, es_url, "replay", "--alias", alias, "--shards", "6", "-q")
    assert ran.exit_code == 0, ran.output
    assert live_shape(es, alias) == IndexShape(shards=6, replicas=0, namespace_shards=2)
    assert_index_matches(coord, es, alias)
    assert not verify_index(coord, es, alias=alias).drift


def test_a_shape_the_server_would_refuse_is_one_line_and_exit_2(
    database_url: str, es_url: str, alias: str,
) -> None:
    for args, says in (
        (["--shards", "2", "--namespace-shards", "2"],
         "namespace shards (2) must be fewer than the index's shards (2)"),
        (["--shards", "0"], "--shards"),
        (["--replicas", "-1"], "--replicas"),
    ):
        ran = _cli(database_url, es_url, "indexer", "run", "--once", "--alias", alias, *args)
        assert ran.exit_code == 2, (args, ran.output)
        lines = ran.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), ran.output
        assert says in lines[0], ran.output
        assert "Traceback" not in ran.output
