"""The two lanes of a partition and targeted wake-ups, on real PostgreSQL and a real
search server: small changes flow past a big subtree rewrite, the checkpoint (and so
``wait_indexed``) still waits for it, and a notification names its partitions."""

from __future__ import annotations

import threading
import time

import psycopg
from elasticsearch import Elasticsearch
from indexer_support import assert_index_matches, bulk_subtree, run_once, running_worker

from coordinator import Coordinator
from coordinator.api import libpq_url
from coordinator.eventlog import NOTIFY_CHANNEL, notified_partitions
from coordinator.indexing import consumer_for


def test_file_renames_flow_past_a_big_subtree_rewrite(
    coord: Coordinator, es: Elasticsearch, alias: str, database_url: str, es_url: str
) -> None:
    coord.create_namespace("lane")
    coord.mkdir("lane", "/home")
    _, count = bulk_subtree(coord, "lane", "/home", "big", dirs=20, files_per_dir=999)
    small = coord.create_file("lane", "/notes", "n").node.id
    run_once(database_url, es_url, alias, partitions=1)
    consumer = consumer_for(alias)
    with running_worker(database_url, es_url, alias, partitions=1, chunk_size=500):
        big = coord.rename("lane", "/home", "house")
        assert big.seq is not None
        seen_before_big_done = 0
        renames = 0
        # Rename a file of the same namespace (same partition) again and again while the
        # 20,000-document rewrite runs; each must become visible on its own.
        while not coord.wait_indexed(big.seq, 0.0, consumer=consumer):
            renames += 1
            r = coord.rename("lane", small, f"notes-{renames}")
            assert r.seq is not None
            deadline = time.monotonic() + 30
            while True:
                doc = es.get(index=alias, id=small, routing="lane", realtime=True)["_source"]
                if doc["seq"] >= r.seq:
                    break
                assert time.monotonic() < deadline, "file rename never became visible"
                time.sleep(0.005)
            assert doc["path"] == f"/notes-{renames}"
            if not coord.wait_indexed(big.seq, 0.0, consumer=consumer):
                # Visible, and read-your-writes still refuses: the rename's seq is above
                # the big rename's, which is not fully in the index yet.
                assert not coord.wait_indexed(r.seq, 0.0, consumer=consumer)
                seen_before_big_done += 1
        assert seen_before_big_done >= 2, (seen_before_big_done, renames)
        assert assert_index_matches(coord, es, alias) == count + 2  # + /home, /notes


def test_notification_names_the_partitions_of_its_namespaces(
    coord: Coordinator, database_url: str
) -> None:
    names = [f"ns-{i}" for i in range(12)]
    got: list[str] = []
    listening = threading.Event()
    done = threading.Event()

    def listen() -> None:
        with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
            conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            listening.set()
            while not done.is_set():
                for note in conn.notifies(timeout=0.2, stop_after=1):
                    got.append(note.payload)

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    assert listening.wait(10)
    for ns in names:
        coord.create_namespace(ns)
    with coord.transaction(names[0]) as tx:  # one transaction, one namespace, 2 events
        tx.mkdir("/a")
        tx.mkdir("/b")
    deadline = time.monotonic() + 10
    while len(got) < len(names) + 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    done.set()
    thread.join(5)
    assert len(got) == len(names) + 1, got
    with coord.engine.connect() as conn:
        for count in (1, 3, 4, 7):
            want = [
                {int(conn.exec_driver_sql(
                    "SELECT mod(hashtext(%(ns)s)::bigint & 2147483647, %(n)s)",
                    {"ns": ns, "n": count},
                ).scalar_one())}
                for ns in [*names, names[0]]
            ]
            assert [notified_partitions(p, count) for p in got] == want
    assert notified_partitions("", 4) is None  # no payload: wake everyone
    assert notified_partitions(None, 4) is None
