"""An import reaches Elasticsearch the way single creates do: the worker indexes every
node an import made (the missing parents it created included), the index then equals
PostgreSQL, a text search finds an imported file under its full path, a later rename of
an imported directory moves its documents, and a replay of the log rebuilds the same
documents. Writers racing the import in the same namespace change nothing of that."""

from __future__ import annotations

import json
import random
import threading
from typing import Any

import pytest
from indexer_support import (
    SearchServerGone,
    assert_index_matches,
    expected_docs,
    index_docs,
    one_chunk_then_gone,
    running_worker,
)
from sqlalchemy import Connection, text

from coordinator import Coordinator
from indexer import bulk, elasticsearch_index, live_nodes
from indexer.applier import ID_CHUNK, Applier
from indexer.contract import search_filters, text_query
from indexer.live_nodes import fetch_nodes
from indexer.plan import plan_batch
from indexer.prefetch import PREFETCH_CHUNKS
from indexer.replay import rebuild
from indexer.search_engine import SearchEngine

DIRS = 12
#: Enough nodes that an import is one batch larger than ID_CHUNK: the worker streams
#: such a batch, reading ahead while it sends (``Applier.send_nodes``).
FILES = 100


def tree_lines(top: str, seed: int = 7) -> list[str]:
    """JSON Lines of ``DIRS`` directories of ``FILES`` files under ``top``, shuffled. Only
    every other directory has a line of its own: the rest are missing parents the
    import creates. Each file holds a word of its own (``word<d>x<f>``)."""
    lines = []
    for d in range(DIRS):
        folder = f"{top}/sub{d % 3}/dir{d}"
        if d % 2 == 0:
            lines.append({"path": folder, "kind": "dir", "metadata": {"dir": d}})
        for f in range(FILES):
            name = f"naïve {f}.txt" if f == 0 else f"file{f}.txt"
            lines.append({"path": f"{folder}/{name}", "kind": "file",
                          "content": f"shared text word{d}x{f}",
                          "metadata": {"d": d, "f": f, "tags": ["imported"]}})
    random.Random(seed).shuffle(lines)
    return [json.dumps(line, ensure_ascii=False) for line in lines]


def search(es: SearchEngine, alias: str, ns: str, words: str, under: str) -> list[str]:
    """Paths of the documents of ``ns`` under ``under`` whose content holds ``words``."""
    es.refresh(alias)
    resp = es.search(alias, {
        "size": 1000,
        "query": {"bool": {"must": [text_query(words)], "filter": search_filters(ns, under)}},
    }, routing=ns)
    return sorted(hit["_source"]["path"] for hit in resp["hits"]["hits"])


def without_seq(docs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {k: {f: v for f, v in d.items() if f != "seq"} for k, d in docs.items()}


def test_an_import_is_indexed_searched_renamed_and_replayed(
    coord: Coordinator, es: SearchEngine, es_url: str, database_url: str, alias: str, ns: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every read of the log below is the worker's or the replay's: none may carry the
    # files' contents (an import's batch is a whole block of them; documents are built
    # from PostgreSQL's rows, which the index comparisons check).
    reads: list[bool] = []
    real_read = Coordinator.read_events

    def read_events(self: Coordinator, *args: Any, **kwargs: Any) -> Any:
        reads.append(kwargs.get("contents", True))
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Coordinator, "read_events", read_events)
    coord.mkdir(ns, "/existing")  # the import adds to a directory that exists
    with running_worker(database_url, es_url, alias, batch_events=100):
        result = coord.import_nodes(ns, tree_lines("/existing/tree"))
        # Every line, the directories without a line of their own, /existing/tree and
        # its three sub<k> directories.
        assert result.created == DIRS * FILES + DIRS + 4 > ID_CHUNK
        assert result.implied_dirs == DIRS // 2 + 4
        assert assert_index_matches(coord, es, alias) == result.created + 1

        assert search(es, alias, ns, "word5x17", "/") == ["/existing/tree/sub2/dir5/file17.txt"]
        assert search(es, alias, ns, "word4x0", "/existing/tree/sub1") == [
            "/existing/tree/sub1/dir4/naïve 0.txt"
        ]
        assert len(search(es, alias, ns, "shared", "/existing/tree/sub0")) == 4 * FILES

        coord.rename(ns, "/existing/tree/sub1", "moved")
        assert_index_matches(coord, es, alias)
        assert search(es, alias, ns, "word4x0", "/") == ["/existing/tree/moved/dir4/naïve 0.txt"]
        assert search(es, alias, ns, "shared", "/existing/tree/sub1") == []

    indexed = without_seq(index_docs(es, alias, ns))
    rebuilt = rebuild(coord, es, source="events", alias=alias)
    assert rebuilt.documents == len(indexed)
    assert without_seq(index_docs(es, alias, ns)) == indexed
    assert reads and not any(reads), reads


def test_writers_racing_an_import_in_the_same_namespace(
    coord: Coordinator, es: SearchEngine, es_url: str, database_url: str, alias: str, ns: str
) -> None:
    """Threads with connections of their own create, rename and delete beside the
    import (and in the directory it adds to) while it runs: the import's events, one
    large range of positions, and theirs interleave in the log; the index ends equal to
    PostgreSQL."""
    coord.mkdir(ns, "/shared")
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            i = 0
            while not stop.is_set() or i < 20:
                path = f"/shared/w{k}-{i}"
                coord.create_file(ns, path, f"writer {k} change {i}")
                if i % 3 == 0:
                    coord.rename(ns, path, f"w{k}-{i}-renamed")
                elif i % 3 == 1:
                    coord.delete(ns, path)
                i += 1
        except BaseException as exc:  # reported below, with the thread's error
            errors.append(exc)

    with running_worker(database_url, es_url, alias, batch_events=100):
        threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        try:
            first = coord.import_nodes(ns, tree_lines("/shared/tree", seed=1))
            second = coord.import_nodes(ns, tree_lines("/elsewhere", seed=2))
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        assert not errors, errors
        assert first.created == second.created == DIRS * FILES + DIRS + 4
        assert assert_index_matches(coord, es, alias) == len(list(coord.walk(ns))) - 1


def test_a_large_batch_that_fails_while_sending_stops_its_reader_first(
    coord: Coordinator, es: SearchEngine, alias: str, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reading thread of a large batch is stopped and its snapshot transaction ended
    before the failure propagates (the batch is retried whole, on a fresh snapshot)."""
    # More chunks than the reader holds ahead (prefetch.PREFETCH_CHUNKS): it is still
    # reading when the sending fails.
    lines = (json.dumps({"path": f"/t/d{i // 500}/f{i}", "kind": "file"}) for i in range(6000))
    result = coord.import_nodes(ns, lines)
    events, _ = coord.read_events(after=0, limit=10_000)
    assert len(events) > (PREFETCH_CHUNKS + 2) * ID_CHUNK
    plan = plan_batch(events)
    elasticsearch_index.ensure_alias(es, alias)
    app = Applier(coord.engine, es, alias, lambda r: None)
    monkeypatch.setattr(bulk, "send_chunks", one_chunk_then_gone())
    try:
        app.apply_nodes(plan, events[-1].position)
    except SearchServerGone:
        # Checked while the exception (and every frame it holds) is alive: the reader
        # must not wait for the garbage collector to be stopped.
        assert not [t for t in threading.enumerate() if t.name == "prefetch"]
        assert coord.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    else:
        pytest.fail("the batch did not fail")

    monkeypatch.undo()
    app.apply_nodes(plan, events[-1].position)  # the batch again, whole
    got = without_seq(index_docs(es, alias, ns))
    assert got == expected_docs(coord, ns)
    assert len(got) == result.created


def _plans_of_fetch(conn: Connection, ids: list[str], ns: str) -> tuple[int, int]:
    """(generic, custom) plans PostgreSQL made for fetch_nodes on ``conn``, after
    running it 12 times (psycopg prepares a statement at its 5th run, PostgreSQL tries
    a generic plan after 5 custom ones)."""
    for k in range(12):
        assert len(fetch_nodes(conn, ns, ids[k * 100:(k + 1) * 100])) == 100
    generic, custom = conn.execute(text(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
        "WHERE statement LIKE '%WITH RECURSIVE want AS%'"
    )).one()
    return int(generic), int(custom)


def test_the_worker_plans_its_reads_for_their_own_ids(
    coord: Coordinator, database_url: str, es_url: str, alias: str, ns: str
) -> None:
    """Right after an import into a table never analyzed, a generic plan of the
    worker's read by ids (fetch_nodes) took 0.57 s for 1,000 nodes instead of 0.03 s
    (bench/README.md). The worker's sessions plan each statement for its parameters."""
    coord.import_nodes(ns, tree_lines("/t"))
    with coord.engine.connect() as conn:
        ids = [str(i) for i in conn.execute(text(
            "SELECT id FROM nodes WHERE namespace = :ns AND parent_id IS NOT NULL ORDER BY id"
        ), {"ns": ns}).scalars()]
        generic, _ = _plans_of_fetch(conn, ids, ns)
        assert generic > 0  # what a session of the coordinator's does
    with running_worker(database_url, es_url, alias) as worker, worker.engine.connect() as conn:
        generic, custom = _plans_of_fetch(conn, ids, ns)
        assert generic == 0 and custom > 0


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan] + [n for child in plan.get("Plans", []) for n in _plan_nodes(child)]


def test_the_worker_reads_nodes_by_index_whatever_the_namespace_size(
    coord: Coordinator, ns: str
) -> None:
    """fetch_nodes walks up from each node by one index probe per step: a plan that
    scans the namespace at each step costs every batch time in proportion to the
    namespace, not to the batch (0.21 s per 1,000 ids at 200,000 nodes)."""
    lines = (json.dumps({"path": f"/t/d{i // 100}/f{i}", "kind": "file"}) for i in range(20_000))
    coord.import_nodes(ns, lines)
    with coord.engine.connect() as conn:
        conn.execute(text("ANALYZE nodes"))
        ids = list(conn.execute(text(
            "SELECT id FROM nodes WHERE namespace = :ns AND parent_id IS NOT NULL "
            "ORDER BY id LIMIT 1000"), {"ns": ns}).scalars())
        plan = conn.execute(
            text("EXPLAIN (FORMAT JSON) " + live_nodes._NODES_WITH_PATHS.text),
            {"ns": ns, "ids": ids},
        ).scalar_one()[0]["Plan"]
    union = next(n for n in _plan_nodes(plan) if n["Node Type"] == "Recursive Union")
    step_up = union["Plans"][1]  # the recursive term: one step up from every row
    scans = sorted({n["Node Type"] for n in _plan_nodes(step_up)
                    if n.get("Relation Name") == "nodes"})
    assert scans == ["Index Scan"], scans
