"""``pathkeeper indexer status``: machine-readable with ``--json``, and a warning (exit 1,
one line) when events wait in a partition no worker holds."""

from __future__ import annotations

import json
import subprocess
import sys

from coordinator import Coordinator
from indexer.worker import Worker, WorkerConfig

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
