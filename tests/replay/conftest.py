"""Fixtures for replay / reindex / verify: a search server per session, an alias per test.

The search server is the session's local node from ``pathkeeper.local.search`` (real
Elasticsearch; noida-db with ``PATHKEEPER_SEARCH=noida``), or the cluster at ``ES_URL``. Each test
gets its own alias (and so its own concrete indices), deleted afterwards.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator import Coordinator
from coordinator.indexing import consumer_for, wait_indexed
from indexer.contract import comparable, expected_document, is_indexed
from indexer.log_scan import current_bound
from indexer.search_engine import SearchEngine
from indexer.verify import stream_index_docs

_aliases = itertools.count()


class RunningWorker:
    """The live indexer worker (``indexer.worker.Worker``) in a thread of this process."""

    def __init__(self, database_url: str, es_url: str, alias: str, **options: Any) -> None:
        from indexer.worker import Worker, WorkerConfig

        self.alias = alias
        options.setdefault("partitions", 2)
        options.setdefault("poll_interval", 0.2)
        self.worker = Worker(WorkerConfig(
            database_url=database_url, es_url=es_url, alias=alias, **options,
        ))
        self.thread = threading.Thread(target=self.worker.run, name="live-worker", daemon=True)

    def __enter__(self) -> RunningWorker:
        self.thread.start()
        assert self.worker.ready.wait(30), "the worker did not start"
        return self

    def caught_up(self, coord: Coordinator, timeout: float = 60.0) -> int:
        """Wait until the worker has applied every committed event; returns that position."""
        bound = current_bound(coord.engine)
        assert wait_indexed(coord.engine, bound, timeout, consumer_for(self.alias))
        return bound

    def __exit__(self, *exc: object) -> None:
        self.worker.stop()
        self.thread.join(60)
        assert not self.thread.is_alive()


@pytest.fixture
def live_worker(database_url: str, es_url: str, alias: str) -> Iterator[RunningWorker]:
    with RunningWorker(database_url, es_url, alias) as worker:
        yield worker


def index_docs(es: SearchEngine, index: str) -> dict[str, dict[str, Any]]:
    """Every document of ``index`` (an alias is fine) by id, without ``seq``."""
    es.refresh(index)
    return {d["node_id"]: comparable(d) for d in stream_index_docs(es, index)}


def expected_index(coord: Coordinator) -> dict[str, dict[str, Any]]:
    """What the index should hold according to PostgreSQL, by id, without ``seq``."""
    docs: dict[str, dict[str, Any]] = {}
    for ns in coord.namespaces():
        for node in coord.walk(ns):
            if is_indexed(node):
                docs[node.id] = expected_document(node)
    return docs


def diff_summary(actual: dict[str, dict[str, Any]], expected: dict[str, dict[str, Any]]) -> str:
    """What differs between two ``index_docs``-style maps, readably (for assertion messages)."""
    extra = sorted(set(actual) - set(expected))
    missing = sorted(set(expected) - set(actual))
    differ = sorted(k for k in set(actual) & set(expected) if actual[k] != expected[k])
    lines = [f"extra {len(extra)}, missing {len(missing)}, differing {len(differ)}"]
    lines += [f"  extra {actual[k]}" for k in extra[:5]]
    lines += [f"  missing {expected[k]}" for k in missing[:5]]
    lines += [f"  differs {actual[k]} != {expected[k]}" for k in differ[:5]]
    return "\n".join(lines)
