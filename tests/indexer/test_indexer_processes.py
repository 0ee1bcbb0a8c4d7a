"""Crash, outage and scale-out claims, with real worker processes and real kill -9."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from indexer_support import (
    TcpProxy,
    assert_index_matches,
    last_position,
    run_clients,
    running_worker,
)
from prometheus_client import REGISTRY
from sqlalchemy import text

from coordinator import Coordinator, CoordinatorError
from coordinator.indexing import consumer_for
from indexer import elasticsearch_index
from indexer.leases import MEMBER_BASE, consumer_key
from indexer.search_client import open_search
from indexer.search_engine import SearchEngine, SearchNotFound
from pathkeeper.local.bulk_tree import bulk_subtree
from pathkeeper.local.search import new_local_search
from pathkeeper.local.worker_process import WorkerProcess

TIMEOUT = 90.0


def wait_until(what: str, cond: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    """Poll an external condition (the index, pg_locks) until it holds."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def count_under(es: SearchEngine, alias: str, ns: str, path: str) -> int:
    if not elasticsearch_index.alias_targets(es, alias):
        return 0  # the worker has not created the index yet
    es.refresh(alias)
    return es.count(alias, {"query": {"bool": {"filter": [{"term": {"namespace": ns}},
                                                          {"term": {"tree": path}}]}}})


def file_client(coord: Coordinator, ns: str, stop: threading.Event) -> None:
    """Light traffic in another namespace: file creates, writes, renames, deletes.
    (No subtree-wide changes: on noida-db each one costs the worker a refresh and a
    search of ~0.2 s on a 20,000-document index, which real Elasticsearch does in
    milliseconds; random_client covers them elsewhere.)"""
    rng = random.Random(5)
    while not stop.is_set():
        name = f"/f{rng.randrange(30)}"
        try:
            op = rng.random()
            if op < 0.4:
                coord.create_file(ns, name, "new")
            elif op < 0.7:
                coord.write_file(ns, name, f"v{rng.random()}")
            elif op < 0.85:
                coord.rename(ns, name, f"f{rng.randrange(30)}")
            else:
                coord.delete(ns, name)
        except CoordinatorError:
            pass
        stop.wait(0.01)  # pacing: light traffic, not a synchronisation


def background_client(coord: Coordinator, ns: str) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    thread = threading.Thread(target=file_client, args=(coord, ns, stop), daemon=True)
    thread.start()
    return stop, thread


def test_kill_9_in_the_middle_of_batches_converges(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str,
    tmp_path: Path,
) -> None:
    coord.create_namespace("crash")
    coord.create_namespace("side")
    coord.mkdir("crash", "/home")
    _, total = bulk_subtree(coord, "crash", "/home", "big", dirs=20, files_per_dir=999)
    created_at = last_position(coord)
    assert total > 20_000
    worker = WorkerProcess(database_url, es_url, alias, tmp_path / "worker.log",
                           "--partitions", "2", "--chunk-size", "500")
    stop_side, side = background_client(coord, "side")
    partial: list[tuple[str, int, int]] = []

    def run_and_kill_mid_batch(path: str, graceful: bool = False) -> None:
        """Start the worker, and kill -9 it as soon as it has written documents under
        ``path`` beyond what was there when it started (in the middle of that batch,
        unless the batch completed first, which the final assertion rules out)."""
        starts = len(worker.started_lines())
        worker.start()
        # A killed client's last bulk request may still complete in the server: count
        # from the moment the new process is up, not from before it started.
        wait_until("the worker to start", lambda: len(worker.started_lines()) > starts)
        before = seen = count_under(es, alias, "crash", path)

        def progressed() -> bool:
            nonlocal seen
            seen = count_under(es, alias, "crash", path)
            return seen > before

        wait_until(f"new documents under {path}", progressed)
        if graceful:
            assert worker.terminate() == 0  # SIGTERM: abandons the batch, exits cleanly
        else:
            worker.kill9()
        if seen < total:
            partial.append((path, before, seen))

    try:
        run_and_kill_mid_batch("/home/big")  # while indexing the 20,000 creates
        # Let a fresh run finish the creates, so the next documents under the new
        # path can only come from the rename's batch.
        worker.start()
        wait_until("the creates indexed", lambda: coord.wait_indexed(
            created_at, 1.0, consumer=consumer_for(alias)))
        worker.kill9()
        coord.rename("crash", "/home", "house")
        run_and_kill_mid_batch("/house/big")  # twice while rewriting 20,000 paths
        run_and_kill_mid_batch("/house/big")
        run_and_kill_mid_batch("/house/big", graceful=True)  # and SIGTERM once
        # Then it runs to the end, and the index equals PostgreSQL.
        starts = len(worker.started_lines())
        worker.start()
        stop_side.set()
        side.join(30)
        assert assert_index_matches(coord, es, alias, timeout=TIMEOUT) > total
        # Its SIGTERM handler is in place once it logged that it started.
        wait_until("the worker to start", lambda: len(worker.started_lines()) > starts)
        assert worker.terminate() == 0  # SIGTERM: clean exit
    finally:
        stop_side.set()
        worker.ensure_dead()
    assert len(worker.started_lines()) == 6
    events = [line.get("event") for line in worker.log_lines()]
    assert "batch_abandoned" in events and "shutdown_requested" in events
    # At least three stops landed in the middle of the big rename's batch.
    assert len([p for p in partial if p[0] == "/house/big"]) >= 3, partial


def test_search_server_down_while_events_arrive_then_back(
    coord: Coordinator, alias: str, database_url: str, tmp_path: Path, es_url: str,
) -> None:
    coord.create_namespace("out")
    coord.mkdir("out", "/docs")
    own = None if os.environ.get("ES_URL") else new_local_search()
    proxy = None
    if own is not None:
        url = own.start()
    else:  # a real cluster we may not stop: cut it off behind a proxy instead
        proxy = TcpProxy(es_url)
        url = proxy.start()
    es = open_search(url, request_timeout=30)
    try:
        with running_worker(database_url, url, alias, partitions=2,
                            backoff_base=0.05, backoff_cap=0.5) as worker:
            first = coord.create_file("out", "/docs/before", "x")
            assert first.seq is not None
            assert coord.wait_indexed(first.seq, 30, consumer=worker.consumer)

            def retries() -> float:
                return sum(
                    REGISTRY.get_sample_value(
                        "pathkeeper_indexer_batch_retries_total",
                        {"consumer": worker.consumer, "partition": str(p)},
                    ) or 0.0
                    for p in range(2)
                )

            before = retries()
            if own is not None:
                own.stop()  # SIGTERM: noida-db would lose its last second of writes on kill -9
            else:
                assert proxy is not None
                proxy.stop()
            during = [coord.create_file("out", f"/docs/f{i}", f"during {i}") for i in range(20)]
            coord.rename("out", "/docs", "papers")
            coord.delete("out", "/papers/f3")
            last = coord.write_file("out", "/papers/f4", "rewritten while down")
            assert last.seq is not None
            wait_until("the worker to fail and back off", lambda: retries() >= before + 2)
            # Nothing was checkpointed past what Elasticsearch did not acknowledge.
            assert not coord.wait_indexed(during[0].seq or 0, 0.2, consumer=worker.consumer)
            if own is not None:
                own.start()  # same port, same data directory
            else:
                assert proxy is not None
                proxy.start()
            assert assert_index_matches(coord, es, alias, timeout=TIMEOUT) == 21
    finally:
        es.close()
        if own is not None:
            own.close()
        if proxy is not None:
            proxy.stop()


def partition_holders(coord: Coordinator, consumer: str) -> set[int]:
    with coord.engine.connect() as conn:
        return set(
            conn.execute(
                text(
                    "SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'advisory' "
                    "AND classid = :k AND objsubid = 2 AND objid < :m AND granted"
                ),
                {"k": consumer_key(consumer), "m": MEMBER_BASE},
            ).scalars()
        )


def test_two_worker_processes_split_partitions_and_converge(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str,
    tmp_path: Path,
) -> None:
    consumer = consumer_for(alias)
    namespaces = [f"ns{i}" for i in range(6)]
    for ns in namespaces:
        coord.create_namespace(ns)
        coord.mkdir(ns, "/a/b", parents=True)
    watched = {ns: coord.create_file(ns, "/a/b/watched", "0").node.id for ns in namespaces}
    workers = [
        WorkerProcess(database_url, es_url, alias, tmp_path / f"w{i}.log", "--partitions", "4")
        for i in range(2)
    ]
    # Per document, the seq seen by realtime GET must never decrease.
    stop = threading.Event()
    regressions: list[Any] = []
    last_seen: dict[str, int] = {}

    def sampler() -> None:
        while not stop.is_set():
            for ns, node_id in watched.items():
                try:
                    got = es.get(index=alias, id=node_id, routing=ns)
                except SearchNotFound:
                    continue
                if got.get("found"):
                    seq = int(got["_source"]["seq"])
                    if seq < last_seen.get(node_id, 0):
                        regressions.append((node_id, last_seen[node_id], seq))
                    last_seen[node_id] = seq
    try:
        for w in workers:
            w.start()
        wait_until("both workers holding partitions",
                   lambda: len(partition_holders(coord, consumer)) == 2)
        sampling = threading.Thread(target=sampler, daemon=True)
        sampling.start()
        assert run_clients(coord, namespaces, clients=4, seconds=3.0, at_least=51) > 50
        workers[0].kill9()  # the survivor takes over its partitions
        assert run_clients(coord, namespaces, clients=2, seconds=1.0, at_least=11) > 10
        wait_until("the survivor holding every partition",
                   lambda: len(partition_holders(coord, consumer)) == 1)
        assert_index_matches(coord, es, alias, timeout=TIMEOUT)
        stop.set()
        sampling.join(30)
        assert workers[1].terminate() == 0
    finally:
        stop.set()
        for w in workers:
            w.ensure_dead()
    assert not regressions, regressions
    assert len(last_seen) >= 1
