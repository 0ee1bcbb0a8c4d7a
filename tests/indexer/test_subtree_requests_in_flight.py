"""A subtree pass keeps several bulk requests in flight, on real PostgreSQL and a real
search server, and what the index ends with does not depend on the order they are
applied in: every document carries its external version, so renames of files and
directories inside the directory, made by clients of their own while its rewrite runs,
all end in the index as PostgreSQL has them."""

from __future__ import annotations

import random
import threading
from typing import cast

from indexer_support import (
    OverlapWatch,
    assert_index_matches,
    expected_docs,
    index_docs,
    last_position,
    run_once,
    running_worker,
)

from coordinator import Coordinator
from coordinator.indexing import consumer_for
from indexer import bulk
from indexer.applier import Applier, SubtreeWork
from indexer.plan import plan_batch
from indexer.search_engine import SearchEngine
from pathkeeper.local.bulk_tree import bulk_subtree


def test_a_subtree_pass_keeps_two_requests_in_flight(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    coord.create_namespace("f")
    _, count = bulk_subtree(coord, "f", "/", "top", dirs=3, files_per_dir=499)
    run_once(database_url, es_url, alias, partitions=1)
    before = last_position(coord)
    coord.rename("f", "/top", "moved")
    events, cursor = coord.read_events(after=before)
    plan = plan_batch(events)
    version = events[-1].position
    watch = OverlapWatch(es)
    applier = Applier(coord.engine, cast(SearchEngine, watch), alias, lambda r: None)
    applier.apply_nodes(plan, version)
    work = SubtreeWork.from_plan(plan, after=before, cursor=cursor, version=version)

    stats = applier.apply_subtrees(work, chunk_size=500)

    assert watch.most == 2  # one at a time before: each request waited alone
    assert bulk.IN_FLIGHT == 2
    assert stats.indexed == count - 1, stats  # /top itself: the node part wrote it
    assert work.timings["requests"] == 3  # 1,500 descendants in requests of 500
    got = {k: {f: v for f, v in d.items() if f != "seq"}
           for k, d in index_docs(es, alias, "f").items()}
    assert got == expected_docs(coord, "f")

    # While the node lane is busy the lane asks for one at a time: so it goes.
    coord.rename("f", "/moved", "again")
    events, cursor2 = coord.read_events(after=cursor)
    plan = plan_batch(events)
    version = events[-1].position
    watch = OverlapWatch(es, hold=0.5)
    applier = Applier(coord.engine, cast(SearchEngine, watch), alias, lambda r: None)
    applier.apply_nodes(plan, version)
    work = SubtreeWork.from_plan(plan, after=cursor, cursor=cursor2, version=version)
    applier.apply_subtrees(work, chunk_size=500, in_flight=lambda: 1)
    assert watch.most == 1


def test_renames_inside_a_directory_during_its_rewrite_end_as_postgresql_has_them(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    coord.create_namespace("c")
    coord.mkdir("c", "/out")
    bulk_subtree(coord, "c", "/", "big", dirs=6, files_per_dir=999)
    files = [n.id for n in coord.walk("c", "/big") if n.kind == "file"]
    subdirs = [n.id for n in coord.listdir("c", "/big")]
    run_once(database_url, es_url, alias, partitions=1)
    consumer = consumer_for(alias)
    during = 0
    lock = threading.Lock()
    failures: list[BaseException] = []

    def client(k: int, big_seq: int, stop: threading.Event) -> None:
        nonlocal during
        rng = random.Random(k)
        with Coordinator.connect(database_url, lock_timeout=5.0) as own:
            try:
                for i in range(60):
                    if stop.is_set():
                        return
                    pick = rng.random()
                    if pick < 0.6:  # a file inside the directory renamed
                        own.rename("c", rng.choice(files), f"r{k}-{i}")
                    elif pick < 0.75:  # a file moved out of it
                        node = own.get("c", rng.choice(files))
                        if node.path.startswith("/out/"):
                            continue
                        own.move("c", node.id, f"/out/m{k}-{i}")
                    elif pick < 0.9:  # a directory inside it renamed: a subtree of its own
                        own.rename("c", subdirs[k % len(subdirs)], f"d{k}-{i}")
                    else:  # a new file in it (in a directory no client renames)
                        own.create_file("c", f"{own.get('c', subdirs[-1]).path}/new{k}-{i}",
                                        "new")
                    if not own.wait_indexed(big_seq, 0.0, consumer=consumer):
                        with lock:
                            during += 1
            except BaseException as exc:
                failures.append(exc)

    with running_worker(database_url, es_url, alias, partitions=1):
        stop = threading.Event()
        big = coord.rename("c", "/big", "house")
        assert big.seq is not None
        clients = [threading.Thread(target=client, args=(k, big.seq, stop)) for k in range(3)]
        for t in clients:
            t.start()
        for t in clients:
            t.join(120)
        stop.set()
        assert not failures, failures
        assert during >= 1, "no change landed while the rewrite ran"
        assert assert_index_matches(coord, es, alias) >= 6 * 1000 + 1
