"""The node lane's pipeline: two bulk requests in flight, on real PostgreSQL and a real
search server. A batch is sent while the one before it is still unanswered; whichever
of the two fails, the checkpoint never passes a batch Elasticsearch has not
acknowledged, the failed work is done again, and the index ends equal to PostgreSQL."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from indexer_support import assert_index_matches, run_once, running_worker

from coordinator import Coordinator
from coordinator.indexing import consumer_for
from indexer.applier import Applier, NodeActions
from indexer.bulk import BulkStats, Retryable
from indexer.search_engine import SearchEngine


def _names(nodes: NodeActions) -> set[str]:
    return {i for p in nodes.plan.namespaces.values() for i in p.nodes}


def _seen(es: SearchEngine, alias: str, node_id: str, seq: int) -> bool:
    got = es.mget(index=alias, realtime=True, docs=[{"_id": node_id, "routing": "pipe"}])
    doc = got["docs"][0]
    return bool(doc.get("found")) and int(doc["_source"]["seq"]) >= seq


@pytest.mark.parametrize("failing", ["first", "second"])
def test_a_failed_request_of_two_in_flight_holds_the_checkpoint_back(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str,
    monkeypatch: pytest.MonkeyPatch, failing: str,
) -> None:
    coord.create_namespace("pipe")
    coord.mkdir("pipe", "/d")
    first_id = coord.create_file("pipe", "/d/first", "1").node.id
    second_id = coord.create_file("pipe", "/d/second", "2").node.id
    run_once(database_url, es_url, alias, partitions=1)
    consumer = consumer_for(alias)
    failing_id = first_id if failing == "first" else second_id
    entered = threading.Event()  # the first batch's request is on its way
    release = threading.Event()  # ... and may be answered
    attempts: dict[str, int] = {first_id: 0, second_id: 0}
    seqs: dict[str, int] = {}
    checkpoint_passed_failed: list[bool] = []
    original = Applier.send_nodes

    def send_nodes(self: Applier, nodes: NodeActions, *args: Any, **kw: Any) -> BulkStats:
        names = _names(nodes)
        for node_id in attempts.keys() & names:
            attempts[node_id] += 1
        if failing_id in names and attempts[failing_id] > 1:
            # The retry: until now nothing may have let the checkpoint past the batch.
            checkpoint_passed_failed.append(
                coord.wait_indexed(seqs[failing_id], 0.0, consumer=consumer)
            )
        if first_id in names and attempts[first_id] == 1:
            entered.set()
            assert release.wait(30), "the test never released the first request"
        if failing_id in names and attempts[failing_id] == 1:
            raise Retryable("injected: SearchEngine refused part of a batch")
        return original(self, nodes, *args, **kw)

    monkeypatch.setattr(Applier, "send_nodes", send_nodes)
    with running_worker(database_url, es_url, alias, partitions=1):
        r1 = coord.rename("pipe", first_id, "first-renamed")
        assert r1.seq is not None
        seqs[first_id] = r1.seq
        assert entered.wait(30), "the first batch was never sent"
        r2 = coord.rename("pipe", second_id, "second-renamed")
        assert r2.seq is not None
        seqs[second_id] = r2.seq
        # The second batch goes out while the first is still unanswered.
        deadline = time.monotonic() + 30
        while attempts[second_id] == 0:
            assert time.monotonic() < deadline, "the second batch waited for the first"
            time.sleep(0.01)
        if failing == "first":
            # The second one's write is acknowledged, the first one's is not: the
            # checkpoint stays before both.
            while not _seen(es, alias, second_id, r2.seq):
                assert time.monotonic() < deadline, "the second request was not applied"
                time.sleep(0.01)
        assert not coord.wait_indexed(r1.seq, 0.3, consumer=consumer)
        release.set()
        assert coord.wait_indexed(r2.seq, 30, consumer=consumer)
    assert attempts[failing_id] == 2, attempts
    assert checkpoint_passed_failed == [False]
    assert _seen(es, alias, first_id, r1.seq) and _seen(es, alias, second_id, r2.seq)
    assert_index_matches(coord, es, alias)
