"""A node-lane batch too large to read at once (an import's: whole blocks of events)
keeps two bulk requests in flight, on real PostgreSQL and a real search server, and
returns only once every request of it was answered: what the index ends with is
PostgreSQL's tree, every document at the batch's version."""

from __future__ import annotations

import json
from typing import cast

from indexer_support import (
    OverlapWatch,
    expected_docs,
    index_docs,
    last_position,
    run_once,
)

from coordinator import Coordinator
from indexer import bulk
from indexer.applier import ID_CHUNK, Applier
from indexer.plan import plan_batch
from indexer.search_engine import SearchEngine


def lines(dirs: int, files: int) -> list[str]:
    return [json.dumps({"path": f"/imp/d{d}/f{f}.txt", "kind": "file",
                        "content": f"text {d} {f}", "metadata": {"d": d}})
            for d in range(dirs) for f in range(files)]


def test_a_large_node_batch_keeps_two_requests_in_flight(
    coord: Coordinator, es: SearchEngine, alias: str, ns: str, database_url: str,
    es_url: str,
) -> None:
    run_once(database_url, es_url, alias, partitions=1)  # the index, and nothing in it
    before = last_position(coord)
    created = coord.import_nodes(ns, lines(3, 700)).created
    assert created > ID_CHUNK  # streamed from a snapshot, not read whole
    events, _cursor = coord.read_events(after=before, limit=10_000, contents=False)
    plan = plan_batch(events)
    version = events[-1].position
    watch = OverlapWatch(es)
    applier = Applier(coord.engine, cast(SearchEngine, watch), alias, lambda r: None,
                      chunk_size=500)

    stats = applier.apply_nodes(plan, version)

    assert watch.most == 2  # one at a time before: each request waited alone
    assert bulk.IN_FLIGHT == 2
    assert stats.indexed == created, stats  # every request answered before it returned
    docs = index_docs(es, alias, ns)
    assert {d["seq"] for d in docs.values()} == {version}
    assert {k: {f: v for f, v in d.items() if f != "seq"} for k, d in docs.items()} \
        == expected_docs(coord, ns)


def test_batches_streaming_at_once_share_the_requests_in_flight(
    coord: Coordinator, es: SearchEngine, alias: str
) -> None:
    # The node lane keeps two batches in flight and partitions share one applier: two
    # imports' batches streaming at once keep one request each, not four between them.
    applier = Applier(coord.engine, es, alias, lambda r: None)
    with applier._node_stream() as first:
        assert first() == bulk.IN_FLIGHT
        with applier._node_stream() as second:
            assert first() == second() == 1
        assert first() == bulk.IN_FLIGHT
