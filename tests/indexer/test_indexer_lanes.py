"""The two lanes of a partition and targeted wake-ups, on real PostgreSQL and a real
search server: small changes flow past a big subtree rewrite, the checkpoint (and so
``wait_indexed``) still waits for it, and a notification names its partitions."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import psycopg
import pytest
from indexer_support import (
    assert_index_matches,
    expected_docs,
    index_docs,
    last_position,
    run_once,
    running_worker,
)

from coordinator import Coordinator
from coordinator.db import libpq_url
from coordinator.event_appender import NOTIFY_CHANNEL
from coordinator.event_reader import notified_partitions
from coordinator.indexing import consumer_for
from indexer import checkpoints
from indexer.applier import Abandoned, Applier, SubtreeWork
from indexer.plan import plan_batch
from indexer.search_engine import SearchEngine
from pathkeeper.local.bulk_tree import bulk_subtree


def test_file_renames_flow_past_a_big_subtree_rewrite(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
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
            # Read-your-writes by seq: the rename's seq is above the big rename's, so it
            # never counts as indexed before the big rename is wholly in the index. Asked
            # in this order, the checkpoint only moving forward, there is no race between
            # the two answers.
            rename_indexed = coord.wait_indexed(r.seq, 0.0, consumer=consumer)
            big_done = coord.wait_indexed(big.seq, 0.0, consumer=consumer)
            assert big_done or not rename_indexed
            if not big_done:
                seen_before_big_done += 1  # visible while the big rewrite still runs
        assert seen_before_big_done >= 2, (seen_before_big_done, renames)
        assert assert_index_matches(coord, es, alias) == count + 2  # + /home, /notes


def test_partitions_without_events_keep_up_without_the_poll_and_do_not_spin(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A notification wakes only the partition its namespace hashes to, yet
    ``wait_indexed`` waits for every partition's checkpoint: the others are woken by the
    partition that read events, so read-your-writes does not wait for the poll (an
    hour here). And while one namespace writes, the partitions with nothing of their
    own read and save their checkpoint about once per read of the busy one, not in a
    loop of their own (with a slow search server, which the busy one waits for)."""
    saves: Counter[int] = Counter()
    real_save = checkpoints.save

    def counting_save(engine: Any, consumer: str, partition: int, position: int) -> None:
        saves[partition] += 1
        real_save(engine, consumer, partition, position)

    monkeypatch.setattr(checkpoints, "save", counting_save)
    real_send = Applier.send_nodes

    def slow_send(self: Applier, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.3)  # a search server that takes its time, as under load
        return real_send(self, *args, **kwargs)

    monkeypatch.setattr(Applier, "send_nodes", slow_send)
    coord.create_namespace("busy")
    f = coord.create_file("busy", "/f0", "x")
    assert f.seq is not None
    consumer = consumer_for(alias)
    with running_worker(database_url, es_url, alias, partitions=4, poll_interval=3600):
        assert coord.wait_indexed(f.seq, 30, consumer=consumer)
        for i in range(1, 6):  # one at a time: each must be indexed without the poll
            moved = coord.rename("busy", f.node.id, f"f{i}").seq
            assert moved is not None
            started = time.monotonic()
            assert coord.wait_indexed(moved, 10, consumer=consumer)
            assert time.monotonic() - started < 5
        saves.clear()
        stop = time.monotonic() + 2.0
        last = 0
        while time.monotonic() < stop:  # a busy log: one writer as fast as it can
            last = coord.rename("busy", f.node.id, f"g{last + 1}").seq or last
        assert coord.wait_indexed(last, 30, consumer=consumer)
    with coord.engine.connect() as conn:
        mine = int(conn.exec_driver_sql(
            "SELECT mod(hashtext('busy')::bigint & 2147483647, 4)").scalar_one())
    busy = saves[mine]
    idle = [n for p, n in saves.items() if p != mine]
    assert len(idle) == 3 and busy > 0, saves
    # About one read (and save) per read of the busy partition; chasing the log on their
    # own, they saved up to seven times as often as it did here.
    assert max(idle) <= busy + 5, (mine, saves)


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
    with coord.engine.connect() as conn:
        hashes = {
            int(conn.exec_driver_sql("SELECT hashtext(%(ns)s)::bigint & 2147483647",
                                     {"ns": ns}).scalar_one())
            for ns in names
        }

    def seen() -> set[int]:
        # Commits close together may share one notification (the notifier coalesces
        # them): what counts is that every namespace written is named, and nothing else.
        return set().union(*(notified_partitions(p, 2**31) or set() for p in list(got)))

    deadline = time.monotonic() + 10
    while seen() != hashes and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # and nothing else arrives
    done.set()
    thread.join(5)
    assert seen() == hashes, got
    assert 1 <= len(got) <= len(names) + 1
    for count in (1, 3, 4, 7):
        for payload in got:
            named = notified_partitions(payload, count)
            assert named and named <= {h % count for h in hashes}
    assert notified_partitions("", 4) is None  # no payload: wake everyone
    assert notified_partitions(None, 4) is None


def test_subtree_pass_cut_short_resumes_with_409s_even_merged_with_later_batches(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    """The restart property without a cut at directory moves: descendants are written at
    their move's position, so a pass stopped midway and applied again, even merged with
    a later batch (hence a larger batch version), finds what it wrote answered by 409."""
    coord.create_namespace("r")
    coord.mkdir("r", "/home")
    _, count = bulk_subtree(coord, "r", "/home", "t", dirs=5, files_per_dir=399)
    run_once(database_url, es_url, alias, partitions=1)
    before = last_position(coord)
    coord.rename("r", "/home", "house")
    first, cursor1 = coord.read_events(after=before)
    coord.create_file("r", "/later", "a later batch")
    second, cursor2 = coord.read_events(after=cursor1)
    applier = Applier(coord.engine, es, alias, lambda r: None, chunk_size=500,
                      stream_chunk=500)
    plan1, plan2 = plan_batch(first), plan_batch(second)
    applier.apply_nodes(plan1, first[-1].position)
    stop = threading.Event()
    pauses = 0

    def pause() -> None:  # called before each 500-action request: stop after two
        nonlocal pauses
        pauses += 1
        if pauses == 3:
            stop.set()

    work = SubtreeWork.from_plan(plan1, after=before, cursor=cursor1, version=first[-1].position)
    try:
        applier.apply_subtrees(work, stop, chunk_size=500, yield_to=pause)
        raise AssertionError("the pass was not cut short")
    except Abandoned:
        pass
    applier.apply_nodes(plan2, second[-1].position)
    again = SubtreeWork.from_plan(plan1, after=before, cursor=cursor1,
                                  version=first[-1].position)
    again.merge(SubtreeWork.from_plan(plan2, after=cursor1, cursor=cursor2,
                                      version=second[-1].position))
    stats = applier.apply_subtrees(again)
    assert stats.already_newer >= 1000, stats  # the two requests sent before the stop
    assert stats.indexed + stats.already_newer == count, stats  # /home itself: node part
    want = expected_docs(coord, "r")
    got = index_docs(es, alias, "r")
    assert {k: {f: v for f, v in d.items() if f != "seq"} for k, d in got.items()} == want
