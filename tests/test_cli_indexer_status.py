"""``pathkeeper indexer status``: machine-readable with ``--json``, and a warning (exit 1,
one line) when events wait in a partition no worker holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from shard_maps import FixedShards

from coordinator import Coordinator
from coordinator.indexing import consumer_for
from coordinator.shard_map import Shard
from indexer.search_client import SearchSecurity
from indexer.worker import Worker, WorkerConfig
from pathkeeper.cli.indexer_status import report
from pathkeeper.local.ports import free_port
from pathkeeper.local.postgres import LocalPostgres

EXIT_WARNING = 1


def _status(database_url: str, alias: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pathkeeper", "indexer", "status", "--database-url",
         database_url, "--alias", alias, *args],
        capture_output=True, text=True, timeout=60)


def test_status_as_json_while_a_worker_holds_every_partition(
    database_url: str, es_url: str, alias: str, coord: Coordinator, worker: Worker, ns: str
) -> None:
    seq = coord.create_file(ns, "/a", "x").seq
    assert seq is not None and coord.wait_indexed(seq, 30, consumer=worker.consumer)
    out = _status(database_url, alias, "--json", "--es-url", es_url)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    doc = json.loads(out.stdout)
    assert doc["consumer"] == worker.consumer and doc["ran"] is True
    (part,) = doc["partitions"]
    assert part["partition"] == 0 and part["checkpoint"] >= seq
    assert part["lag_events"] == 0 and part["lag_seconds"] == 0
    assert isinstance(part["holder_pid"], int) and part["namespaces"] == []
    assert doc["lag_events"] == 0 and doc["dead_letters_pending"] == 0
    assert doc["held_back_by"] == [] and doc["warnings"] == []
    assert doc["alias"] == {"name": alias, "indices": [f"{alias}-v1"]}


def test_events_waiting_with_no_worker_is_a_warning_exit(
    database_url: str, es_url: str, alias: str, coord: Coordinator, ns: str
) -> None:
    coord.create_file(ns, "/a", "x")
    never = _status(database_url, alias)
    assert never.returncode == EXIT_WARNING, never.stdout + never.stderr
    assert never.stderr == (f"warning: consumer indexer:{alias} never ran while the event log "
                            "holds events (start pathkeeper indexer run)\n")
    config = WorkerConfig(database_url=database_url, es_url=es_url, alias=alias,
                          partitions=2, once=True)
    assert Worker(config).run() == 0
    caught_up = _status(database_url, alias)
    assert caught_up.returncode == 0 and caught_up.stderr == "", caught_up.stderr
    for i in range(3):
        coord.create_file(ns, f"/late{i}", "x")
    behind = _status(database_url, alias)
    assert behind.returncode == EXIT_WARNING, behind.stdout + behind.stderr
    (line,) = behind.stderr.splitlines()
    assert line.startswith("warning: no worker holds partition ") and "3 events wait" in line
    as_json = _status(database_url, alias, "--json")
    warned = as_json.stderr.strip()
    assert as_json.returncode == EXIT_WARNING and warned.startswith("warning: no worker holds")
    doc = json.loads(as_json.stdout)
    assert doc["lag_events"] == 3 and doc["warnings"] == [warned.removeprefix("warning: ")]
    waiting = [p for p in doc["partitions"] if p["lag_events"]]
    assert waiting and all(p["holder_pid"] is None for p in waiting)
    assert waiting[0]["namespaces"][0]["namespace"] == ns


def test_status_per_shard_names_the_shard_behind_and_the_shard_down(
    database_url: str, pg_cluster: LocalPostgres, es_url: str, alias: str, coord: Coordinator,
    ns: str, capsys: pytest.CaptureFixture[str],
) -> None:
    second = pg_cluster.create_database(f"pk_status_b_{os.getpid()}", template="pk_template")
    shards = [Shard("a", database_url), Shard("b", second)]
    coord.create_file(ns, "/a", "x")
    with Coordinator.connect(second) as coord_b:
        coord_b.create_namespace("nb")
        coord_b.create_file("nb", "/b", "x")
        config = WorkerConfig(database_url=database_url, es_url=es_url, alias=alias,
                              partitions=2, once=True)
        assert Worker(config, FixedShards(shards)).run() == 0
        for i in range(3):
            coord_b.create_file("nb", f"/late{i}", "x")
    name = consumer_for(alias)
    security = SearchSecurity()
    assert report(shards, alias, name, None, security, as_json=True) == EXIT_WARNING
    out = capsys.readouterr()
    doc = json.loads(out.out)
    a, b = doc["shards"]
    assert (a["name"], a["lag_events"], a["error"]) == ("a", 0, None)
    assert (b["name"], b["lag_events"]) == ("b", 3)
    assert [p["partition"] for p in a["partitions"]] == [0, 1]
    assert doc["lag_events"] == 3 and len(doc["partitions"]) == 4
    assert {p["shard"] for p in doc["partitions"]} == {"a", "b"}
    (warning,) = doc["warnings"]
    assert warning.startswith("shard b: no worker holds partition") and "3 events" in warning
    assert out.err == f"warning: {warning}\n"
    # A shard that does not answer is reported; the others are read on.
    down = Shard("c", f"postgresql://nobody@127.0.0.1:{free_port()}/none")
    assert report([*shards, down], alias, name, None, security, as_json=False) == EXIT_WARNING
    out = capsys.readouterr()
    assert "shard a:\nconsumer " in out.out and "shard c: did not answer" in out.out
    assert out.err.splitlines()[-1].startswith("warning: shard c did not answer: ")
