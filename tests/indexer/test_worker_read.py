"""The worker's read of the log ships and decodes no payload its plan does not read:
created, written and metadata_set events are planned from their type and node id, so
their payloads stay in PostgreSQL; every other event keeps its payload (moves need
their old paths, deletes their path and count), and the plan is the same as from a
full read. Other readers (the public read, the feed) still get every payload."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg.types.json
import pytest
from indexer_support import assert_index_matches, running_worker

from coordinator import Coordinator
from coordinator.indexing import consumer_for
from indexer.plan import PAYLOAD_FREE_TYPES, plan_batch
from indexer.search_engine import SearchEngine

N = 300


@pytest.fixture
def json_loads_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many json/jsonb values psycopg decodes in this process from now on (every
    connection's loader, the pool's included, reads the class's function)."""
    calls = [0]

    def counting(data: Any) -> Any:
        calls[0] += 1
        return json.loads(data)

    monkeypatch.setattr(psycopg.types.json._JsonLoader, "_loads", staticmethod(counting))
    yield calls


def _load(coord: Coordinator, ns: str) -> None:
    coord.mkdir(ns, "/d/e", parents=True)
    for i in range(N):
        coord.create_file(ns, f"/d/f{i}", f"body {i}", {"i": i})
    coord.write_file(ns, "/d/f0", "new body")
    coord.set_metadata(ns, "/d/f1", {"k": "v"})
    coord.rename(ns, "/d/f2", "g2")  # a file move
    coord.rename(ns, "/d", "d2")  # a directory move: old path needed
    coord.delete(ns, "/d2/e", recursive=True)
    coord.delete(ns, "/d2/f3")


def test_the_workers_read_decodes_no_payload_of_node_only_events(
    coord: Coordinator, ns: str, json_loads_calls: list[int]
) -> None:
    _load(coord, ns)
    json_loads_calls[0] = 0
    full, cursor = coord.read_events(after=0, limit=10_000, contents=False)
    decoded_by_full = json_loads_calls[0]
    assert decoded_by_full == len(full)  # every payload, as before
    light, light_cursor = coord.read_events(
        after=0, limit=10_000, contents=False, bare_types=PAYLOAD_FREE_TYPES)
    decoded = json_loads_calls[0] - decoded_by_full
    kept = [e for e in full if e.type not in PAYLOAD_FREE_TYPES]
    assert len(kept) == 5  # namespace_created, two moves, two deletes
    assert decoded == len(kept)  # N + 4 node-only events decoded nothing
    assert light_cursor == cursor
    assert [(e.position, e.namespace, e.type, e.node_id, e.committed_at) for e in light] == [
        (e.position, e.namespace, e.type, e.node_id, e.committed_at) for e in full]
    for f, e in zip(full, light, strict=True):
        assert e.payload == ({} if f.type in PAYLOAD_FREE_TYPES else f.payload)
    assert plan_batch(light) == plan_batch(full)


def test_the_worker_indexes_every_kind_without_those_payloads(
    coord: Coordinator, ns: str, es: SearchEngine, alias: str, database_url: str, es_url: str,
    json_loads_calls: list[int],
) -> None:
    """The worker, end to end: the load's documents are in the index as PostgreSQL has
    them, and the worker decoded fewer payloads than there were node-only events."""
    _load(coord, ns)
    _, end = coord.read_events(after="now")
    json_loads_calls[0] = 0
    with running_worker(database_url, es_url, alias):
        assert coord.wait_indexed(end, 60, consumer=consumer_for(alias))
        decoded = json_loads_calls[0]
        assert assert_index_matches(coord, es, alias) == N  # /d2 and the files, less /d2/f3
    assert decoded < 20, decoded
