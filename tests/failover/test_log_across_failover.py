"""The event log across a failover: positions keep increasing past every cursor a reader
was handed; the worker's LISTEN and leases come back on the new primary.

A sequence is WAL-logged ahead (32 values at a time) and that record is made durable
by the next commit, not by ``nextval``: a block taken by a transaction that then rolled
back can exist only on the primary. A reader that moved its cursor past such a block
on the old primary must not see the promoted standby hand the same positions out
again (they would be below its cursor: skipped, and their documents refused as older
versions). The walwriter is slowed here so that nothing but a commit flushes WAL."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from coordinator import Coordinator
from coordinator.commands import Mkdir
from coordinator.db import connect_engine, libpq_url
from coordinator.errors import Unavailable
from coordinator.event_appender import NOTIFY_CHANNEL
from coordinator.event_reader import read_events
from coordinator.migrate import upgrade
from coordinator.results import MutationResult
from coordinator.settings import Settings
from indexer.leases import Leases
from indexer.wakeup import Listener
from pathkeeper.local.ha import LocalHACluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalHACluster]:
    with LocalHACluster(extra_settings={"wal_writer_delay": "10000ms"}) as c:
        yield c


def _execute_until_up(url: str, command: Mkdir, timeout: float = 60.0) -> MutationResult:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with Coordinator.connect(url) as coord:
                return coord.execute("t", command)
        except Unavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_positions_after_promotion_are_above_every_cursor_handed_out(
    cluster: LocalHACluster,
) -> None:
    url = cluster.create_database("positions")
    upgrade(url)
    with Coordinator.connect(url) as coord:
        coord.create_namespace("t")
        first = coord.execute("t", Mkdir("/a"))

    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        # Use up the sequence's logged run (each nextval alone: a logging one commits).
        while True:
            row = conn.execute("SELECT log_cnt FROM event_position_seq").fetchone()
            assert row is not None
            if row[0] == 0:
                break
            conn.execute("SELECT nextval('event_position_seq')")
        # The next block logs a new run, and its transaction rolls back: that record
        # is in the old primary's WAL buffers only.
        with conn.transaction(force_rollback=True):
            conn.execute("SELECT nextval('event_position_seq')")

    engine = connect_engine(url, Settings())
    try:
        events, cursor = read_events(engine, after=0)
    finally:
        engine.dispose()
    assert first.seq is not None and events[-1].position >= first.seq
    killed = cluster.kill_primary()
    cluster.wait_primary(other_than=killed)

    after = _execute_until_up(url, Mkdir("/b")).seq
    assert after is not None and after > cursor, (after, cursor)


def test_listen_and_leases_come_back_on_the_new_primary(cluster: LocalHACluster) -> None:
    """The worker's LISTEN thread and lease connection die with the old primary; the
    thread listens again on the new one (a notification sent there wakes it), and the
    leases are seen lost, then taken again there."""
    url = cluster.create_database("listen")
    upgrade(url)
    woken: list[str | None] = []
    listener = Listener(url, woken.append)
    leases = Leases(url, "failover")
    listener.start()
    try:
        assert listener.listening.wait(10)
        assert leases.join() == 0 and leases.try_acquire(0)

        killed = cluster.kill_primary()
        cluster.wait_primary(other_than=killed)
        assert not leases.alive()  # every lease is lost with the old primary
        assert leases.join() == 0 and leases.try_acquire(0)  # and taken on the new one

        deadline = time.monotonic() + 30
        while "after-failover" not in woken:
            assert time.monotonic() < deadline, woken
            with psycopg.connect(libpq_url(url), autocommit=True) as conn:
                conn.execute(f"NOTIFY {NOTIFY_CHANNEL}, 'after-failover'")
            time.sleep(0.5)
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
            assert row == (False,)
    finally:
        listener.stop()
        leases.close()
