"""The indexer over several shards (PostgreSQL servers), all written into one index:
real worker processes killed with ``kill -9``, a shard's server stopped and started."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from indexer_support import assert_index_matches_shards, random_client, running_worker
from sqlalchemy import text

from coordinator import Coordinator
from coordinator.indexing import consumer_for, wait_indexed
from coordinator.migrate import upgrade
from coordinator.shard_map import Shard
from indexer.leases import IN_THIS_DATABASE, MEMBER_BASE, consumer_key
from indexer.search_engine import SearchEngine
from pathkeeper.local.postgres import LocalPostgres
from pathkeeper.local.worker_process import WorkerProcess

TIMEOUT = 90.0
SHARD_WORKER = Path(__file__).resolve().parents[1] / "shard_maps.py"
sys.path.insert(0, str(SHARD_WORKER.parent))
from shard_maps import FixedShards  # noqa: E402


def wait_until(what: str, cond: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def second_url(pg_cluster: LocalPostgres) -> str:
    """A second shard: another database of the throwaway cluster."""
    return pg_cluster.create_database(f"pk_shard_b_{os.getpid()}_{time.monotonic_ns()}",
                                      template="pk_template")


@pytest.fixture
def coord_b(second_url: str) -> Iterator[Coordinator]:
    with Coordinator.connect(second_url, lock_timeout=5.0) as c:
        yield c


def lease_holders(coord: Coordinator, alias: str) -> dict[int, int]:
    """partition -> pid of the lease connection holding it, on this shard."""
    with coord.engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT objid::bigint AS p, pid FROM pg_locks WHERE locktype = 'advisory' "
            "AND classid = :k AND objsubid = 2 AND objid < :m AND granted AND "
            + IN_THIS_DATABASE),
            {"k": consumer_key(consumer_for(alias)), "m": MEMBER_BASE}).all()
    return {int(r.p): int(r.pid) for r in rows}


def shard_worker(alias: str, es_url: str, shards: list[Shard], log_path: Path) -> WorkerProcess:
    """An indexer worker process over ``shards`` (``tests/shard_maps.py`` run as a script)."""
    proc = WorkerProcess(shards[0].url, es_url, alias, log_path)
    proc.cmd = [sys.executable, str(SHARD_WORKER), alias, "2", es_url,
                *(f"{s.name}={s.url}" for s in shards)]
    return proc


def test_two_workers_two_shards_kill_9_moves_leases_and_loses_nothing(
    coord: Coordinator, coord_b: Coordinator, database_url: str, second_url: str,
    es: SearchEngine, es_url: str, alias: str, tmp_path: Path,
) -> None:
    shards = [Shard("a", database_url), Shard("b", second_url)]
    for c, names in ((coord, ["a1", "a2"]), (coord_b, ["b1", "b2"])):
        for ns in names:
            c.create_namespace(ns)
            c.mkdir(ns, "/d")
            c.create_file(ns, "/d/f", "first")
    one = shard_worker(alias, es_url, shards, tmp_path / "one.log").start()
    two = shard_worker(alias, es_url, shards, tmp_path / "two.log").start()
    stop = threading.Event()
    clients = [threading.Thread(target=random_client, args=(c, names, stop, seed), daemon=True)
               for seed, (c, names) in enumerate(((coord, ["a1", "a2"]), (coord_b, ["b1", "b2"])))]
    try:
        # Fair share on each shard: each worker holds one of its two partitions.
        for c in (coord, coord_b):
            wait_until("both workers holding a partition of each shard",
                       lambda c=c: len(set(lease_holders(c, alias).values())) == 2)
        before = {id(c): set(lease_holders(c, alias).values()) for c in (coord, coord_b)}
        for t in clients:
            t.start()
        time.sleep(1.0)  # writes under way on both shards while one worker dies
        one.kill9()
        # Its (shard, partition) leases move to the survivor on each shard.
        for c in (coord, coord_b):
            def moved(c: Coordinator = c) -> bool:
                held = lease_holders(c, alias)
                return len(held) == 2 and len(set(held.values())) == 1
            wait_until("the survivor holding every partition of the shard", moved)
            survivor = set(lease_holders(c, alias).values())
            assert survivor < before[id(c)]  # one of the two lease connections of before
        time.sleep(1.0)
        stop.set()
        for t in clients:
            t.join(30)
        assert assert_index_matches_shards([coord, coord_b], es, alias, TIMEOUT) >= 8
    finally:
        stop.set()
        one.ensure_dead()
        two.ensure_dead()
    started = [line for line in two.log_lines() if line.get("event") == "worker_started"]
    assert started and started[0]["shards"] == "a,b"


def test_a_shard_down_stops_only_its_own_indexing_and_catches_up_after(
    coord: Coordinator, database_url: str, es: SearchEngine, es_url: str, alias: str,
) -> None:
    own = LocalPostgres()
    own.start()
    try:
        own.create_database("pk")
        url_b = own.url("pk")
        upgrade(url_b)
        shards = FixedShards([Shard("a", database_url), Shard("b", url_b)])
        consumer = consumer_for(alias)
        with Coordinator.connect(url_b, lock_timeout=5.0) as coord_b, running_worker(
            database_url, es_url, alias, shard_map=shards, partitions=2,
            backoff_base=0.05, backoff_cap=0.5, poll_interval=0.2,
        ):
            coord.create_namespace("on-a")
            coord_b.create_namespace("on-b")
            first_b = coord_b.create_file("on-b", "/before", "x")
            assert first_b.seq is not None
            assert coord_b.wait_indexed(first_b.seq, 30, consumer=consumer)
            # Written on b just before its server stops: maybe not indexed yet.
            late_b = coord_b.create_file("on-b", "/late", "written as it stopped")
            assert late_b.seq is not None
            own.pg_ctl_stop("fast")
            coord_b.engine.dispose()  # its pooled sessions died with the server
            # The other shard's indexing goes on while b is down.
            for i in range(5):
                r = coord.create_file("on-a", f"/while-b-down-{i}", "a")
                assert r.seq is not None
                assert coord.wait_indexed(r.seq, 30, consumer=consumer), i
            time.sleep(1.0)  # b's runners and lease connection back off meanwhile
            own.pg_ctl_start()
            after_b = coord_b.create_file("on-b", "/after", "y")
            assert after_b.seq is not None
            assert coord_b.wait_indexed(after_b.seq, 60, consumer=consumer)
            assert assert_index_matches_shards([coord, coord_b], es, alias, TIMEOUT) == 8
    finally:
        own.stop()


def test_wait_indexed_is_per_shard_and_done_at_once_below_log_from(
    coord: Coordinator, coord_b: Coordinator, database_url: str, second_url: str,
    es_url: str, alias: str,
) -> None:
    consumer = consumer_for(alias)
    shards = FixedShards([Shard("a", database_url), Shard("b", second_url)])
    coord.create_namespace("on-a")
    coord_b.create_namespace("on-b")
    with running_worker(database_url, es_url, alias, shard_map=shards, partitions=2):
        a = coord.create_file("on-a", "/x", "a")
        b = coord_b.create_file("on-b", "/x", "b")
        assert a.seq is not None and b.seq is not None
        assert wait_indexed(coord.engine, a.seq, 30, consumer, namespace="on-a")
        assert wait_indexed(coord_b.engine, b.seq, 30, consumer, namespace="on-b")
    # No worker now: a new write on b is not indexed, and a's checkpoints say nothing of it.
    later = coord_b.create_file("on-b", "/y", "b")
    assert later.seq is not None
    assert not wait_indexed(coord_b.engine, later.seq, 0.3, consumer, namespace="on-b")
    # A namespace moved to b: its positions up to log_from were indexed by its old shard.
    with coord_b.engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO namespace_placement (namespace, state, log_from) "
            "VALUES ('moved', 'active', :f)"), {"f": later.seq + 10_000_000})
    started = time.monotonic()
    assert wait_indexed(coord_b.engine, later.seq + 5_000_000, 5, consumer, namespace="moved")
    assert time.monotonic() - started < 1.0
    # The same through the coordinator, which routes by the namespace.
    assert coord_b.wait_indexed(later.seq + 5_000_000, 0.3, consumer, namespace="moved")
    # Above it, the rule is b's checkpoints again; and only for that namespace.
    assert not wait_indexed(coord_b.engine, later.seq + 20_000_000, 0.3, consumer,
                            namespace="moved")
    assert not wait_indexed(coord_b.engine, later.seq + 5_000_000, 0.3, consumer,
                            namespace="on-b")


def test_a_shard_that_cannot_start_holds_up_no_other(
    coord: Coordinator, database_url: str, pg_cluster: LocalPostgres, es_url: str, alias: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A database never migrated: no retry cures it, but only that shard waits for it.
    bare = pg_cluster.create_database(f"pk_bare_{os.getpid()}_{time.monotonic_ns()}")
    shards = FixedShards([Shard("a", database_url), Shard("b", bare)])
    coord.create_namespace("on-a")
    with running_worker(database_url, es_url, alias, shard_map=shards, partitions=2,
                        backoff_base=0.05, backoff_cap=0.5) as worker:
        r = coord.create_file("on-a", "/x", "a")
        assert r.seq is not None
        assert coord.wait_indexed(r.seq, 30, consumer=consumer_for(alias))
        wait_until("the refusal logged", lambda: any(
            rec.getMessage() == "shard_cannot_start"
            and getattr(rec, "fields", {}).get("shard") == "b" for rec in caplog.records))
        assert [sw.ready for sw in worker.shards] == [True, False]
