"""A document the search server can never take (larger than its request limit,
``http.max_content_length``) goes to the dead letters and everything else goes on:
the worker's partition, ``replay``, ``reindex`` and ``verify``.

The shared search server's request limit is static (100 MB), so these tests start a
throwaway node of their own with a limit of 1 MB, and store a file of 1.5 MB behind
the coordinator's back (a direct UPDATE: a row written before the content limit
existed, or under a larger one).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from indexer_support import running_worker
from prometheus_client import REGISTRY
from sqlalchemy import text

from coordinator import Coordinator
from coordinator.indexing import consumer_for
from coordinator.paths import MAX_CONTENT_BYTES
from indexer import deadletters
from indexer.bulk import Rejected, send
from indexer.contract import index_action
from indexer.elasticsearch_index import content_limit_problem, request_limit
from indexer.replay import rebuild
from indexer.search_client import open_search
from indexer.search_engine import SearchEngine
from pathkeeper.cli.main import main
from pathkeeper.local.search import VERSION_ENV, search_kind
from pathkeeper.local.search_node import ENGINES, LocalSearchNode

LIMIT = "1mb"
HUGE = 1_500_000  # characters of content: more than the node takes in one request


@pytest.fixture(scope="module")
def small_es_url() -> Iterator[str]:
    # The session's engine and version (PATHKEEPER_SEARCH, PATHKEEPER_SEARCH_VERSION):
    # the request limit is a setting of both families.
    kind = search_kind()
    engine = kind if kind in ENGINES else "elasticsearch"
    version = os.environ.get(VERSION_ENV, "").strip() or None if kind == engine else None
    with LocalSearchNode(heap="512m", settings={"http.max_content_length": LIMIT},
                         engine=engine, version=version) as node:
        yield node.url


@pytest.fixture
def small_es(small_es_url: str) -> Iterator[SearchEngine]:
    client = open_search(small_es_url, request_timeout=60)
    yield client
    client.close()


def _store_huge(coord: Coordinator, ns: str, path: str) -> str:
    """Create ``path`` through the coordinator, then make its content 1.5 MB in place,
    in its row and in its event (what the worker and reindex read, and what replay
    folds)."""
    node = coord.create_file(ns, path, "small for now").node
    with coord.engine.begin() as conn:
        conn.execute(text("UPDATE nodes SET content = repeat('x', :n) "
                          "WHERE namespace = :ns AND id = :id"),
                     {"n": HUGE, "ns": ns, "id": node.id})
        conn.execute(text("UPDATE events SET payload = jsonb_set(payload, '{content}', "
                          "to_jsonb(repeat('x', :n))) WHERE namespace = :ns AND node_id = :id"),
                     {"n": HUGE, "ns": ns, "id": node.id})
    return node.id


def _too_large_count(consumer: str) -> float:
    return REGISTRY.get_sample_value(
        "pathkeeper_indexer_documents_too_large_total", {"consumer": consumer}) or 0.0


def test_bulk_splits_a_refused_request_down_to_the_document_that_cannot_fit(
    small_es: SearchEngine, alias: str
) -> None:
    from indexer import elasticsearch_index
    from indexer.contract import concrete_name

    index = concrete_name(alias, 1)
    elasticsearch_index.create_index(small_es, index)
    elasticsearch_index.switch_alias(small_es, alias, index)
    base = {"namespace": "n", "parent_id": "00000000-0000-0000-0000-000000000000",
            "kind": "file", "metadata": {},
            "version": 1}
    from coordinator import Node

    nodes = [Node(id=f"00000000-0000-0000-0000-{i:012d}", name=f"f{i}", path=f"/f{i}",
                  content="y" * 200_000, **base) for i in range(12)]
    huge = Node(id="00000000-0000-0000-0000-999999999999", name="huge", path="/huge",
                content="x" * HUGE, **base)
    actions = [index_action(alias, n, 5) for n in [*nodes[:6], huge, *nodes[6:]]]
    rejected: list[Rejected] = []
    # 12 x 200 KB plus 1.5 MB: one request of 4 MB, refused whole (413).
    stats = send(small_es, actions, rejected.append, max_chunk_bytes=8 * 1024 * 1024)
    assert stats.indexed == 12 and stats.rejected == 1
    assert [(r.node_id, r.status) for r in rejected] == [(huge.id, 413)]
    assert rejected[0].size is not None and rejected[0].size > HUGE
    assert rejected[0].document is None  # 1.5 MB is not copied into the dead letters
    small_es.refresh(alias)
    assert small_es.count(alias) == 12


def test_the_worker_dead_letters_it_and_the_partition_goes_on(
    coord: Coordinator, small_es: SearchEngine, small_es_url: str, alias: str,
    database_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = consumer_for(alias)
    counted = _too_large_count(consumer)
    coord.create_namespace("big")
    coord.create_namespace("other")
    coord.mkdir("big", "/d")
    huge = _store_huge(coord, "big", "/d/huge")
    coord.create_file("big", "/d/after", "next to it")
    last = coord.create_file("other", "/fine", "another namespace, same partition")
    assert last.seq is not None
    caplog.set_level(logging.WARNING, logger="pathkeeper.indexer")
    with running_worker(database_url, small_es_url, alias, partitions=1) as _:
        # The checkpoint moves past the document (the partition does not stall on it).
        assert coord.wait_indexed(last.seq, 30.0, consumer=consumer)
        small_es.refresh(alias)
        assert small_es.exists(index=alias, id=last.node.id, routing="other")
        assert not small_es.exists(index=alias, id=huge, routing="big")
        # A move rewrites the subtree (the subtree lane's streamed requests): the same.
        moved = coord.rename("big", "/d", "e")
        after = coord.create_file("other", "/later", "still indexed")
        assert moved.seq is not None and after.seq is not None
        assert coord.wait_indexed(after.seq, 30.0, consumer=consumer)
        small_es.refresh(alias)
        paths = {h["_source"]["path"] for h in small_es.search(
            alias, {"query": {"match_all": {}}, "size": 100})["hits"]["hits"]}
        assert paths == {"/e", "/e/after", "/fine", "/later"}
    letters = deadletters.pending(coord.engine, consumer)
    assert {(d.namespace, d.node_id) for d in letters} == {("big", huge)}
    assert all(d.error.startswith("413") and "bytes" in d.error for d in letters)
    assert _too_large_count(consumer) - counted == len(letters) >= 2
    warned = [r for r in caplog.records
              if r.getMessage() == "document_too_large" and r.levelno == logging.WARNING]
    assert warned, [r.getMessage() for r in caplog.records]
    fields = warned[0].fields  # type: ignore[attr-defined]
    assert fields["namespace"] == "big" and fields["node_id"] == huge
    assert fields["size"] > HUGE
    # At start, the worker said the content limit (8 MiB) cannot fit this server's 1 MB.
    said = [r.fields for r in caplog.records  # type: ignore[attr-defined]
            if r.getMessage() == "content_limit_exceeds_search_server"]
    assert said and said[0]["search_server_limit"] == 1 << 20
    assert said[0]["max_content_bytes"] == MAX_CONTENT_BYTES
    # A retry meets the same limit; once the file fits, it writes it and clears the letters.
    assert deadletters.retry(coord.engine, small_es, alias, consumer) == (0, len(letters))
    coord.write_file("big", huge, "small again")
    assert deadletters.retry(coord.engine, small_es, alias, consumer) == (len(letters), 0)
    assert small_es.get(index=alias, id=huge, routing="big")["_source"]["path"] == "/e/huge"
    assert deadletters.pending(coord.engine, consumer) == []


def test_the_search_servers_request_limit_is_read_and_checked(es: SearchEngine) -> None:
    # The shared node runs with Elasticsearch's default, which the default limit fits
    # (parsing sizes and the check alone: tests/unit/test_schedules_and_durations.py).
    limit = request_limit(es)
    assert limit == 100 << 20
    assert content_limit_problem(limit, MAX_CONTENT_BYTES) is None


@pytest.mark.parametrize("command", ["replay", "reindex"])
def test_rebuilds_skip_it_and_report_it(
    coord: Coordinator, small_es: SearchEngine, small_es_url: str, alias: str,
    database_url: str, command: str,
) -> None:
    coord.create_namespace("big")
    huge = _store_huge(coord, "big", "/huge")
    fine = coord.create_file("big", "/fine", "fine")
    result = rebuild(coord, small_es, source="events" if command == "replay" else "snapshot",
                     alias=alias)
    assert result.swapped
    assert [r.node_id for r in result.too_large] == [huge]
    small_es.refresh(alias)
    assert small_es.exists(index=alias, id=fine.node.id, routing="big")
    assert not small_es.exists(index=alias, id=huge, routing="big")
    # Recorded for the live worker's consumer: listed and retried with the others.
    letters = deadletters.pending(coord.engine, consumer_for(alias))
    assert [d.node_id for d in letters] == [huge]
    # The command says so, names it, and exits 1 (the index was swapped in without it).
    out = CliRunner().invoke(main, [command, "--alias", alias, "--quiet"], env={
        "PATHKEEPER_DATABASE_URL": database_url, "PATHKEEPER_ES_URL": small_es_url})
    assert out.exit_code == 1, out.output
    assert "1 document too large for the search server, left out" in out.output
    assert f"big {huge}" in out.output


def test_verify_says_a_dead_lettered_document_is_one_not_silent_drift(
    coord: Coordinator, small_es: SearchEngine, small_es_url: str, alias: str,
    database_url: str,
) -> None:
    coord.create_namespace("big")
    huge = _store_huge(coord, "big", "/huge")
    fine = coord.create_file("big", "/fine", "fine")
    result = rebuild(coord, small_es, source="snapshot", alias=alias)
    assert [r.node_id for r in result.too_large] == [huge]
    coord.write_file("big", "/fine", "changed behind the index's back")  # no worker runs
    env = {"PATHKEEPER_DATABASE_URL": database_url, "PATHKEEPER_ES_URL": small_es_url}
    out = CliRunner().invoke(main, ["verify", "--alias", alias, "--quiet", "--no-log"],
                             env=env)
    assert out.exit_code == 1, out.output  # /fine did drift
    assert f"differs big {fine.node.id}" in out.output
    assert f"missing big {huge}" not in out.output
    assert "1 dead-lettered" in out.output
    assert f"dead letter big {huge}: 413 document of" in out.output
    # --repair rewrites the drift and leaves the dead letter alone (it cannot fit).
    fixed = CliRunner().invoke(main, ["verify", "--alias", alias, "--quiet", "--no-log",
                                      "--repair"], env=env)
    assert fixed.exit_code == 0, fixed.output
    again = CliRunner().invoke(main, ["verify", "--alias", alias, "--quiet", "--no-log"],
                               env=env)
    assert again.exit_code == 0 and "0 drifted" in again.output, again.output
    assert "1 dead-lettered" in again.output


def test_verify_repair_dead_letters_a_drift_too_large_to_write(
    coord: Coordinator, small_es: SearchEngine, small_es_url: str, alias: str,
    database_url: str,
) -> None:
    coord.create_namespace("big")
    grown = coord.create_file("big", "/grows", "small when indexed").node.id
    rebuild(coord, small_es, source="snapshot", alias=alias)
    with coord.engine.begin() as conn:  # grows past the server's limit, no worker running
        conn.execute(text("UPDATE nodes SET content = repeat('x', :n) WHERE id = :id"),
                     {"n": HUGE, "id": grown})
    env = {"PATHKEEPER_DATABASE_URL": database_url, "PATHKEEPER_ES_URL": small_es_url}
    out = CliRunner().invoke(main, ["verify", "--alias", alias, "--quiet", "--no-log",
                                    "--repair"], env=env)
    assert out.exit_code == 1, out.output  # drift it could not repair
    assert f"differs big {grown}" in out.output and "not repaired" in out.output
    letters = deadletters.pending(coord.engine, consumer_for(alias))
    assert [(d.node_id, d.error[:3]) for d in letters] == [(grown, "413")]
    again = CliRunner().invoke(main, ["verify", "--alias", alias, "--quiet", "--no-log"],
                               env=env)
    assert again.exit_code == 0, again.output
    assert f"dead letter big {grown}: 413" in again.output
