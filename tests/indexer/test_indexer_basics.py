"""The index contract and the worker's basic behaviour, on a real search server."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from indexer_support import assert_index_matches, index_docs, running_worker
from prometheus_client import REGISTRY
from tree_checks import writer_holding_its_block

from coordinator import Coordinator
from coordinator.indexing import consumer_for
from indexer import contract, elasticsearch_index, status
from indexer.search_engine import SearchEngine


def search_ids(
    es: SearchEngine, alias: str, ns: str, query: dict[str, Any] | None
) -> set[str]:
    es.refresh(alias)
    filters = [{"term": {"namespace": ns}}] + ([query] if query is not None else [])
    resp = es.search(alias, {"size": 1000, "query": {"bool": {"filter": filters}}},
                     routing=ns)
    return {h["_source"]["path"] for h in resp["hits"]["hits"]}


def test_index_is_created_behind_the_alias_with_a_strict_mapping(
    es: SearchEngine, alias: str
) -> None:
    concrete = elasticsearch_index.ensure_alias(es, alias)
    assert concrete == f"{alias}-v1"
    assert elasticsearch_index.ensure_alias(es, alias) == concrete  # idempotent
    got = es.get_indices(concrete)[concrete]
    assert got["mappings"]["dynamic"] == "strict"
    assert got["mappings"]["properties"]["tree"]["type"] == "keyword"
    assert got["settings"]["index"]["gc_deletes"] == contract.GC_DELETES
    v2 = contract.concrete_name(alias, 2)
    assert elasticsearch_index.create_index(es, v2)
    assert not elasticsearch_index.create_index(es, v2)
    assert elasticsearch_index.switch_alias(es, alias, v2) == [concrete]
    assert elasticsearch_index.alias_targets(es, alias) == [v2]


def test_renamed_files_are_found_under_their_new_paths(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    coord.create_namespace("seed")
    coord.create_namespace("other")
    coord.mkdir("seed", "/clinton/projects/elasticsearch", parents=True)
    coord.create_file("seed", "/clinton/projects/elasticsearch/README.txt", "hello")
    coord.create_file("seed", "/clinton/notes.txt", "n")
    coord.mkdir("other", "/clinton")  # same path, other namespace: must never show up
    coord.mkdir("seed", "/obamacare")  # shares a prefix, not a directory, with /obama
    with running_worker(database_url, es_url, alias):
        result = coord.rename("seed", "/clinton", "obama")
        assert result.seq is not None
        assert coord.wait_indexed(result.seq, 30, consumer=consumer_for(alias))
        under_obama = search_ids(es, alias, "seed", contract.subtree_filter("/obama"))
        assert under_obama == {
            "/obama", "/obama/notes.txt", "/obama/projects", "/obama/projects/elasticsearch",
            "/obama/projects/elasticsearch/README.txt",
        }
        assert search_ids(es, alias, "seed", contract.subtree_filter("/clinton")) == set()
        assert search_ids(es, alias, "other", contract.subtree_filter("/clinton")) == {"/clinton"}
        # Content is searchable; directories carry no content field.
        assert search_ids(es, alias, "seed", {"match": {"content": "hello"}}) == {
            "/obama/projects/elasticsearch/README.txt"
        }
        docs = index_docs(es, alias, "seed")
        assert all(("content" in d) == (d["kind"] == "file") for d in docs.values())
        assert len(docs) == 6  # the root is not indexed
        assert_index_matches(coord, es, alias)


def test_wait_indexed(coord: Coordinator, es: SearchEngine, alias: str, database_url: str,
                      es_url: str) -> None:
    coord.create_namespace("w")
    seq = coord.create_file("w", "/f", "x").seq
    assert seq is not None
    consumer = consumer_for(alias)
    assert not coord.wait_indexed(seq, 0.3, consumer=consumer)  # no worker ran yet
    with running_worker(database_url, es_url, alias):
        assert coord.wait_indexed(seq, 30, consumer=consumer)
        moved = coord.move("w", "/f", "/g").seq
        assert moved is not None
        assert coord.wait_indexed(moved, 30, consumer=consumer)
        # Read-your-writes by realtime GET, no refresh needed.
        node = coord.stat("w", "/g")
        doc = es.get(index=alias, id=node.id, routing="w")["_source"]
        assert doc["path"] == "/g" and doc["seq"] >= moved


def test_set_metadata_reaches_the_document(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    coord.create_namespace("m")
    d = coord.mkdir("m", "/d")
    coord.create_file("m", "/d/f", "body", {"lang": "en"})
    consumer = consumer_for(alias)
    with running_worker(database_url, es_url, alias):
        on_dir = coord.set_metadata("m", "/d", {"owner": "bill"})
        on_file = coord.set_metadata("m", "/d/f", {"tags": ["a", "b"]})
        assert on_file.seq is not None
        assert coord.wait_indexed(on_file.seq, 30, consumer=consumer)
        docs = index_docs(es, alias, "m")
        assert docs[d.node.id]["metadata"] == {"owner": "bill"}
        assert docs[d.node.id]["seq"] >= (on_dir.seq or 0)
        assert docs[on_file.node.id]["metadata"] == {"tags": ["a", "b"]}
        assert docs[on_file.node.id]["content"] == "body"  # untouched
        assert_index_matches(coord, es, alias)


def test_worker_reports_the_writer_its_reader_waits_for(
    coord: Coordinator, database_url: str, es_url: str, alias: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A writer holds its block of positions open: the worker cannot move past it, and
    after ``read_report_after`` seconds it logs and exports whom it waits for (pid,
    database, age); once the writer has committed, the report is withdrawn."""
    coord.create_namespace("t")
    consumer = consumer_for(alias)
    database = coord.engine.url.database
    caplog.set_level(logging.INFO, logger="pathkeeper.indexer")

    def age(pid: int) -> float | None:
        return REGISTRY.get_sample_value(
            "pathkeeper_indexer_read_blocker_age_seconds",
            {"consumer": consumer, "pid": str(pid), "database": str(database)},
        )

    def waiting() -> float | None:
        return REGISTRY.get_sample_value(
            "pathkeeper_indexer_read_waiting_seconds", {"consumer": consumer, "partition": "0"}
        )

    with running_worker(database_url, es_url, alias, partitions=1, read_wait=1.0,
                        read_report_after=0.3):
        with writer_holding_its_block(coord, "t", "/open") as pid:
            deadline = time.monotonic() + 20
            while (age(pid) or 0) < 1.0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert (age(pid) or 0) >= 1.0  # open for over a second: exported, with its age
            assert (waiting() or 0) > 0
            assert pid in [w.pid for w in status.held_back_by(coord.engine, older_than=0.5)]
            reports = [r for r in caplog.records if r.getMessage() == "log_read_waiting"]
            assert reports, [r.getMessage() for r in caplog.records]
            blockers = getattr(reports[-1], "fields", {})["blockers"]
            assert any(b["pid"] == pid and b["database"] == database for b in blockers)
        after = coord.mkdir("t", "/after").seq
        assert after is not None and coord.wait_indexed(after, 30, consumer=consumer)
        deadline = time.monotonic() + 10
        while (age(pid) is not None or waiting()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert age(pid) is None and waiting() == 0
        assert any(r.getMessage() == "log_read_resumed" for r in caplog.records)
