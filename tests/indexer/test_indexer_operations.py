"""Operating the indexer: dead letters, status, metrics-free CLI paths."""

from __future__ import annotations

import copy
import time
import urllib.request

from click.testing import CliRunner
from indexer_support import run_once, running_worker

from coordinator import Coordinator
from coordinator.indexing import consumer_for
from indexer import contract, deadletters, elasticsearch_index
from indexer.search_engine import SearchEngine
from pathkeeper.cli.main import main
from pathkeeper.local.ports import free_port


def test_rejected_document_goes_to_dead_letters_and_the_worker_goes_on(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    # An index whose mapping disagrees with ours: `name` must be a number, so a
    # node named "bad" is rejected for good (400), the others are accepted.
    broken = copy.deepcopy(contract.MAPPINGS)
    broken["properties"]["name"] = {"type": "long"}
    v1 = contract.concrete_name(alias, 1)
    es.create_index(v1, mappings=broken, settings=contract.index_settings())
    elasticsearch_index.switch_alias(es, alias, v1)
    coord.create_namespace("d")
    ok = coord.create_file("d", "/1", "one")
    bad = coord.create_file("d", "/bad", "never fits")
    last = coord.create_file("d", "/2", "two")
    assert last.seq is not None

    run_once(database_url, es_url, alias)
    consumer = consumer_for(alias)
    assert coord.wait_indexed(last.seq, 1.0, consumer=consumer)  # the checkpoint moved on
    assert es.exists(index=alias, id=ok.node.id, routing="d")
    assert es.exists(index=alias, id=last.node.id, routing="d")
    assert not es.exists(index=alias, id=bad.node.id, routing="d")
    letters = deadletters.pending(coord.engine, consumer)
    assert [(d.namespace, d.node_id) for d in letters] == [("d", bad.node.id)]
    assert "400" in letters[0].error and letters[0].document is not None
    assert letters[0].document["path"] == "/bad"

    runner = CliRunner()
    env = {"PATHKEEPER_DATABASE_URL": database_url, "PATHKEEPER_ES_URL": es_url}
    listed = runner.invoke(main, ["indexer", "dead-letters", "--alias", alias], env=env)
    assert listed.exit_code == 0, listed.output
    assert bad.node.id in listed.output and "1 pending" in listed.output
    # Still rejected: the retry fails, and says so.
    failed = runner.invoke(main, ["indexer", "dead-letters", "--alias", alias, "--retry"], env=env)
    assert failed.exit_code == 1 and "1 still failing" in failed.output
    # Fix the index, retry: the node is written as it is now.
    coord.rename("d", "/bad", "good-now")
    v2 = contract.concrete_name(alias, 2)
    elasticsearch_index.create_index(es, v2)
    elasticsearch_index.switch_alias(es, alias, v2)
    fixed = runner.invoke(main, ["indexer", "dead-letters", "--alias", alias, "--retry"], env=env)
    assert fixed.exit_code == 0 and "1 fixed" in fixed.output, fixed.output
    assert es.get(index=alias, id=bad.node.id, routing="d")["_source"]["path"] == "/good-now"
    assert deadletters.pending(coord.engine, consumer) == []


def test_status_shows_lag_per_partition_and_namespace(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    runner = CliRunner()
    env = {"PATHKEEPER_DATABASE_URL": database_url}
    never = runner.invoke(main, ["indexer", "status", "--alias", alias], env=env)
    assert never.exit_code == 0 and "never ran" in never.output
    coord.create_namespace("s1")
    coord.create_file("s1", "/a", "a")
    run_once(database_url, es_url, alias, partitions=3)
    caught_up = runner.invoke(main, ["indexer", "status", "--alias", alias], env=env)
    assert caught_up.exit_code == 0, caught_up.output
    assert "3 partitions" in caught_up.output and "namespace" not in caught_up.output
    for i in range(4):
        coord.create_file("s1", f"/late{i}", "x")
    behind = runner.invoke(main, ["indexer", "status", "--alias", alias], env=env)
    assert "namespace s1: 4 events" in behind.output, behind.output
    assert "dead letters pending: 0" in behind.output


def test_metrics_are_served_while_the_worker_runs(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    port = free_port()
    coord.create_namespace("m")
    with running_worker(database_url, es_url, alias, metrics_port=port,
                        poll_interval=0.1) as worker:
        seq = coord.create_file("m", "/a", "x").seq
        assert seq is not None and coord.wait_indexed(seq, 30, consumer=worker.consumer)
        labels = f'consumer="{worker.consumer}"'

        def scrape() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return str(r.read().decode())

        text = scrape()
        assert f"pathkeeper_indexer_events_applied_total{{{labels}" in text
        assert f"pathkeeper_indexer_partitions_held{{{labels}}} 2.0" in text
        # The periodic job publishes lag gauges (every 5 s at most).
        deadline = time.monotonic() + 30
        while f"pathkeeper_indexer_lag_events{{{labels}" not in text:
            assert time.monotonic() < deadline, "no lag gauges"
            time.sleep(0.2)
            text = scrape()
