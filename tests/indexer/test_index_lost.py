"""An alias or index deleted by hand is reported, never silently replaced by an empty one.

Before, the worker recreated ``<alias>-v1`` empty after its next failed batch, pointed
the alias at it and carried on: ``wait_indexed`` said true and ``/readyz`` ok while
search found nothing. Now nothing recreates it but a rebuild, and the worker, its
metric, ``indexer status`` and ``/readyz`` all say what to run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator

import pytest
from indexer_support import assert_index_matches
from prometheus_client import REGISTRY

from coordinator import Coordinator
from indexer import contract, elasticsearch_index, metrics
from indexer.replay import rebuild
from indexer.search_engine import SearchEngine
from indexer.worker import Worker, WorkerConfig
from pathkeeper.http.app import create_app
from pathkeeper.http.settings import ServiceSettings

with warnings.catch_warnings():  # starlette's own deprecation notice about httpx
    warnings.filterwarnings("ignore", message=".*httpx2")
    from fastapi.testclient import TestClient


@pytest.fixture
def client(database_url: str, es_url: str, alias: str) -> Iterator[TestClient]:
    settings = ServiceSettings(database_url=database_url, es_url=es_url, index_alias=alias)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def missing_gauge(worker: Worker) -> float | None:
    return REGISTRY.get_sample_value("pathkeeper_indexer_index_missing",
                                     {"consumer": worker.consumer})


def status(database_url: str, es_url: str, alias: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pathkeeper", "indexer", "status", "--database-url", database_url,
         "--es-url", es_url, "--alias", alias],
        capture_output=True, text=True, timeout=60, env={**os.environ},
    )


@pytest.mark.parametrize("how", ["alias", "index"])
def test_a_deleted_alias_or_index_stops_indexing_and_says_what_to_run(
    how: str, coord: Coordinator, es: SearchEngine, alias: str, es_url: str,
    database_url: str, worker: Worker, client: TestClient,
) -> None:
    coord.create_namespace("n")
    first = coord.create_file("n", "/before", "x")
    assert first.seq is not None
    assert coord.wait_indexed(first.seq, 30, consumer=worker.consumer)
    assert client.get("/readyz").status_code == 200
    (concrete,) = elasticsearch_index.alias_targets(es, alias)
    if how == "alias":
        es.update_aliases([{"remove": {"index": concrete, "alias": alias}}])
    else:
        es.delete_index(concrete)

    later = coord.create_file("n", "/after", "y")
    assert later.seq is not None
    assert not coord.wait_indexed(later.seq, 3.0, consumer=worker.consumer)
    deadline = time.monotonic() + 30
    while missing_gauge(worker) != 1.0 and time.monotonic() < deadline:
        time.sleep(0.1)  # the worker notices after its next failed batch
    assert missing_gauge(worker) == 1.0
    assert elasticsearch_index.alias_targets(es, alias) == []  # not recreated
    assert elasticsearch_index.our_indices(es, alias) == ([concrete] if how == "alias" else [])
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert "pathkeeper reindex" in ready.json()["detail"]
    st = status(database_url, es_url, alias)
    assert st.returncode == 3, st.stdout + st.stderr
    assert "Traceback" not in st.stderr
    assert "pathkeeper reindex" in st.stderr
    # A worker started now refuses as well instead of creating an empty index.
    with pytest.raises(elasticsearch_index.IndexMissing):
        Worker(WorkerConfig(database_url=database_url, es_url=es_url, alias=alias,
                            once=True)).run()

    # What the message says to run brings everything back, and the worker resumes.
    result = rebuild(coord, es, source="snapshot", alias=alias)
    assert result.swapped
    assert coord.wait_indexed(later.seq, 30, consumer=worker.consumer)
    assert assert_index_matches(coord, es, alias) == 2
    assert client.get("/readyz").status_code == 200
    assert status(database_url, es_url, alias).returncode == 0
    deadline = time.monotonic() + 30
    while missing_gauge(worker) != 0.0 and time.monotonic() < deadline:
        coord.write_file("n", "/after", f"{time.monotonic()}")  # a batch clears it
        time.sleep(0.3)
    assert missing_gauge(worker) == 0.0


def test_the_first_start_still_creates_the_index(
    coord: Coordinator, es: SearchEngine, alias: str, es_url: str, database_url: str,
) -> None:
    coord.create_namespace("n")
    coord.create_file("n", "/f", "x")
    assert Worker(WorkerConfig(database_url=database_url, es_url=es_url, alias=alias,
                               once=True)).run() == 0
    assert elasticsearch_index.alias_targets(es, alias) == [contract.concrete_name(alias, 1)]
    assert assert_index_matches(coord, es, alias) == 1


def test_a_write_through_the_alias_clears_the_missing_gauge(
    coord: Coordinator, worker: Worker
) -> None:
    """Once the alias is back, the next answered write says so. (After a rebuild, the
    step that first succeeded may not write at all and so have found the alias still
    missing; without this the gauge stayed at 1 while indexing went on.)"""
    coord.create_namespace("n")
    first = coord.create_file("n", "/a", "x")
    assert first.seq is not None and coord.wait_indexed(first.seq, 30, consumer=worker.consumer)
    metrics.INDEX_MISSING.labels(worker.consumer).set(1)  # as a check before the swap left it
    later = coord.write_file("n", "/a", "y")
    assert later.seq is not None and coord.wait_indexed(later.seq, 30, consumer=worker.consumer)
    assert missing_gauge(worker) == 0.0
