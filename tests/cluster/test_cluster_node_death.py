"""A data node holding primaries of the index dies (``kill -9``) in the middle of a
rename-heavy load, on a real 3-node cluster of the engine and version under test
(``PATHKEEPER_SEARCH``/``PATHKEEPER_SEARCH_VERSION``), and comes back later on its own
data directory.

The index has several shards and one replica of each, so the cluster promotes the
dead node's replicas and nothing it acknowledged is lost. Asserted: every rename the
coordinator acknowledged is in the index at the end; the worker (never restarted)
backs off and resumes by itself; at the end the index equals PostgreSQL (0 missing,
0 extra, 0 wrong, by verify). Measured and printed: the time without indexing, from
the kill to the first advance of the worker's checkpoints after it, and the longest
stall of the checkpoints after the kill.

Three nodes, not two: every node is master-eligible and a cluster of two has no
quorum of masters once either dies, so it would stop taking writes until the node
came back (that is an outage, which tests/indexer covers); three keep two.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from indexer_support import assert_index_matches, running_worker, worker_alive
from sqlalchemy import text

from coordinator import Coordinator, CoordinatorError
from coordinator.indexing import consumer_for
from indexer.contract import IndexShape
from indexer.elasticsearch_index import drop_alias_and_indices, ensure_alias
from indexer.search_client import open_search
from indexer.search_engine import SearchEngine, SearchNotFound
from indexer.verify import verify_index
from pathkeeper.local.bulk_tree import bulk_subtree
from pathkeeper.local.search import VERSION_ENV, search_kind
from pathkeeper.local.search_cluster import ClusterNode, LocalSearchCluster

NS = "load"
ALIAS = "cluster-kill"
#: Four shards over three nodes: one node holds two primaries (the one killed).
SHAPE = IndexShape(shards=4, replicas=1)
CLIENTS = 4
#: The load runs this long before the kill, this long after it (while the node
#: starts again: it takes tens of seconds here), and again once the node is back.
BEFORE_KILL = 4.0
AFTER_KILL = 8.0
AFTER_RESTART = 3.0
DIR_SHARE = 0.2


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalSearchCluster]:
    engine = search_kind()
    if engine == "noida":
        pytest.skip("noida-db, the stand-in, is a single process: it has no cluster to "
                    "lose a node of (run with PATHKEEPER_SEARCH=elasticsearch|opensearch)")
    started = time.monotonic()
    with LocalSearchCluster(3, engine=engine,
                            version=os.environ.get(VERSION_ENV, "").strip() or None) as c:
        print(f"\n{c.label} formed in {time.monotonic() - started:.1f} s")
        yield c


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return json.load(resp)


def _primaries(node: ClusterNode, index: str) -> dict[str, int]:
    """Primaries of ``index`` per node name."""
    count: dict[str, int] = {}
    for shard in _get_json(f"{node.url}/_cat/shards/{index}?format=json"):
        if shard["prirep"] == "p" and shard.get("node"):
            count[shard["node"]] = count.get(shard["node"], 0) + 1
    return count


class Checkpoints:
    """Samples the sum of the consumer's checkpoints (it grows whenever any partition
    moves on) every 20 ms, with the time of each change."""

    def __init__(self, coord: Coordinator, consumer: str) -> None:
        self.coord = coord
        self.consumer = consumer
        self.changes: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoints", daemon=True)

    def _run(self) -> None:
        with self.coord.engine.connect() as conn:
            while not self._stop.is_set():
                total = int(conn.execute(
                    text("SELECT coalesce(sum(position), 0) FROM checkpoints "
                         "WHERE consumer = :c"), {"c": self.consumer}).scalar_one())
                conn.commit()
                if not self.changes or total != self.changes[-1][1]:
                    self.changes.append((time.monotonic(), total))
                self._stop.wait(0.02)

    def __enter__(self) -> Checkpoints:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def first_advance_after(self, t: float) -> float | None:
        return next((at - t for at, _ in self.changes if at > t), None)

    def longest_stall(self, start: float, end: float) -> float:
        """The longest time without a change between ``start`` and ``end``."""
        times = [start] + [at for at, _ in self.changes if start < at < end] + [end]
        return max(b - a for a, b in itertools.pairwise(times))


class Renames:
    """Writer threads, each with its own connections from the coordinator's pool,
    renaming random files and directories; every acknowledged rename is recorded."""

    def __init__(self, coord: Coordinator, dirs: list[str], files: list[str],
                 round_: int) -> None:
        self.coord = coord
        self.round = round_  # in every new name: a rename is never to the name it has
        self.dirs = dirs
        self.files = files
        self.acknowledged: list[tuple[str, str, int]] = []  # (node id, name, seq)
        self.refused = 0
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, args=(k,), name=f"renamer-{k}")
                         for k in range(CLIENTS)]

    def _client(self, k: int) -> None:
        rng = random.Random(f"{self.round}-{k}")
        i = 0
        try:
            while not self.stop.is_set():
                i += 1
                node_id = rng.choice(self.dirs if rng.random() < DIR_SHARE else self.files)
                name = f"n{self.round}-{k}-{i}"
                try:
                    result = self.coord.rename(NS, node_id, name)
                except CoordinatorError:  # a lock wait that timed out, say: not acknowledged
                    with self._lock:
                        self.refused += 1
                    continue
                assert result.seq is not None
                with self._lock:
                    self.acknowledged.append((node_id, name, result.seq))
        except BaseException as exc:
            self.errors.append(exc)

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(60)
        assert not self.errors, self.errors


class Events(logging.Handler):
    """The worker's log events by name (``batch_failed``: a batch it backs off and
    retries)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.names: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        name = record.getMessage()
        self.names[name] = self.names.get(name, 0) + 1


def test_kill_9_of_a_data_node_holding_primaries_loses_nothing_and_indexing_resumes(
    cluster: LocalSearchCluster, coord: Coordinator, database_url: str,
) -> None:
    started = time.monotonic()
    coord.create_namespace(NS)
    bulk_subtree(coord, NS, "/", "top", dirs=20, files_per_dir=50)
    nodes = [n for n in coord.walk(NS) if n.parent_id is not None]
    dirs = [n.id for n in nodes if n.is_dir]
    files = [n.id for n in nodes if not n.is_dir]

    # The index first, to know which node holds the most primaries: the worker talks
    # to another node (a client of one URL would lose the cluster with its node).
    first = open_search(cluster.url, request_timeout=60)
    try:
        drop_alias_and_indices(first, ALIAS)
        index = ensure_alias(first, ALIAS, shape=SHAPE)
    finally:
        first.close()
    assert not cluster.health(wait_for_status="green", timeout="60s")["timed_out"]
    primaries = _primaries(cluster.nodes[0], index)
    victim = cluster.node(max(primaries, key=lambda name: primaries[name]))
    survivor = next(n for n in cluster.nodes if n is not victim)
    print(f"primaries per node {primaries}; killing {victim.name}, worker on {survivor.name}")

    events = Events()
    logging.getLogger("pathkeeper.indexer").addHandler(events)
    es: SearchEngine = open_search(survivor.url, request_timeout=60)
    try:
        with running_worker(database_url, survivor.url, ALIAS, partitions=2,
                            poll_interval=0.2, index_shape=SHAPE) as worker, \
                Checkpoints(coord, consumer_for(ALIAS)) as checkpoints:
            load = Renames(coord, dirs, files, 0)
            load.start()
            time.sleep(BEFORE_KILL)  # the load's duration before the kill
            killed_at = time.monotonic()
            victim.kill()
            restart_errors: list[BaseException] = []

            def restart() -> None:
                try:
                    victim.start()
                except BaseException as exc:
                    restart_errors.append(exc)

            restarter = threading.Thread(target=restart, name="restart-victim")
            restarter.start()  # at once: a node takes tens of seconds to start here
            time.sleep(AFTER_KILL)  # the load's duration with the node dead
            load.finish()
            restarter.join(300)
            back_at = time.monotonic()
            assert not restart_errors, restart_errors
            cluster.wait_formed()
            # More renames while the node's shards recover from the others.
            burst = Renames(coord, dirs, files, 1)
            burst.start()
            time.sleep(AFTER_RESTART)  # the load's duration with the node back
            burst.finish()
            load.acknowledged += burst.acknowledged
            load.refused += burst.refused
            assert not cluster.health(wait_for_status="green", timeout="120s")["timed_out"]
            # Caught up, by the same worker: it backed off and resumed by itself.
            assert_index_matches(coord, es, ALIAS, timeout=120)
            assert worker_alive(worker)
            ended_at = time.monotonic()

        # Every acknowledged rename is there (or a later write of its node is).
        newest: dict[str, tuple[str, int]] = {}
        for node_id, name, seq in load.acknowledged:
            if node_id not in newest or seq > newest[node_id][1]:
                newest[node_id] = (name, seq)
        for node_id, (name, seq) in newest.items():
            try:
                doc = es.get(index=ALIAS, id=node_id, routing=NS, realtime=True)["_source"]
            except SearchNotFound:
                raise AssertionError(f"acknowledged rename of {node_id} to {name} lost") from None
            assert doc["seq"] >= seq and doc["name"] == name, (node_id, name, seq, doc)
        report = verify_index(coord, es, alias=ALIAS, namespaces=[NS])
        assert not report.drift, report.drift[:5]
        assert report.compared == len(nodes)

        without = checkpoints.first_advance_after(killed_at)
        assert without is not None
        stall = checkpoints.longest_stall(killed_at, killed_at + AFTER_KILL)
        print(
            f"{cluster.label}: {len(load.acknowledged)} renames acknowledged "
            f"({load.refused} refused), {report.compared} documents equal to PostgreSQL; "
            f"kill -9 of {victim.name} ({primaries[victim.name]} of {SHAPE.shards} primaries) "
            f"-> first checkpoint advance {without:.2f} s, longest stall under load after it "
            f"{stall:.2f} s; node back after {back_at - killed_at:.1f} s; worker retried "
            f"{events.names.get('batch_failed', 0)} batches; test {ended_at - started:.1f} s"
        )
    finally:
        logging.getLogger("pathkeeper.indexer").removeHandler(events)
        try:
            drop_alias_and_indices(es, ALIAS)
        finally:
            es.close()
