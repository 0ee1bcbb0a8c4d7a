"""A lone change's way to the index costs one wake-up, one read and one small request:
the read is one connection and three statements (the bound's two, the select), the
node fetch one statement in autocommit, and a notification that arrives while a
runner reads is never lost (real concurrent writers, no poll to catch up with)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from indexer_support import running_worker
from sqlalchemy import Engine, event, text

from coordinator import Coordinator
from coordinator.errors import CursorExpired
from coordinator.event_reader import Partition
from coordinator.indexing import consumer_for
from indexer.applier import Applier
from indexer.contract import source_of
from indexer.plan import plan_batch
from indexer.search_engine import SearchEngine


@contextmanager
def traced(engine: Engine) -> Iterator[dict[str, list[Any]]]:
    """Every statement sent on ``engine`` (its text, and whether the driver connection
    was in autocommit: no BEGIN and COMMIT around it) and every pool checkout."""
    seen: dict[str, list[Any]] = {"statements": [], "checkouts": []}

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        driver = conn.connection.dbapi_connection
        seen["statements"].append((" ".join(statement.split())[:60], driver.autocommit))

    def on_checkout(*args: Any) -> None:
        seen["checkouts"].append(1)

    event.listen(engine, "before_cursor_execute", on_execute)
    event.listen(engine, "checkout", on_checkout)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)
        event.remove(engine, "checkout", on_checkout)


def test_a_read_with_nothing_in_flight_is_one_connection_and_three_statements(
    coord: Coordinator, ns: str
) -> None:
    coord.create_file(ns, "/f", "x")
    _, cursor = coord.read_events(after=0)
    moved = coord.rename(ns, "/f", "g")
    with traced(coord.engine) as seen:
        events, after = coord.read_events(after=cursor, partition=Partition(0, 1))
    assert [e.position for e in events] == [moved.seq]
    assert after >= (moved.seq or 0)
    # The sequence's last value, the position lock's holders, the events (with the
    # compaction horizon of the same snapshot): no BEGIN, ROLLBACK or second checkout.
    assert len(seen["checkouts"]) == 1, seen
    assert len(seen["statements"]) == 3, seen["statements"]
    assert all(autocommit for _, autocommit in seen["statements"]), seen["statements"]


def test_the_horizon_read_with_the_events_still_refuses_a_compacted_cursor(
    coord: Coordinator, ns: str
) -> None:
    coord.create_file(ns, "/f", "x")
    moved = coord.rename(ns, "/f", "g")
    assert moved.seq is not None
    # A compaction's horizon, committed before the read: events after cursor 0 are gone.
    with coord.engine.begin() as conn:
        conn.execute(text("INSERT INTO log_horizon (id, position, snapshot_id) "
                          "VALUES (1, :p, 0)"), {"p": moved.seq - 1})
    with pytest.raises(CursorExpired):
        coord.read_events(after=0)
    events, _ = coord.read_events(after=moved.seq - 1)
    assert [e.position for e in events] == [moved.seq]


def test_a_lone_changes_nodes_are_one_statement_in_autocommit(
    coord: Coordinator, ns: str, es: SearchEngine, alias: str
) -> None:
    coord.mkdir(ns, "/d")
    _, cursor = coord.read_events(after=0)
    coord.create_file(ns, "/d/f", "x")
    events, _ = coord.read_events(after=cursor)
    applier = Applier(coord.engine, es, alias, lambda r: None)
    with traced(coord.engine) as seen:
        nodes = applier.read_nodes(plan_batch(events), events[-1].position)
    assert nodes.actions is not None and len(nodes.actions) == 1
    source = source_of(nodes.actions[0])
    assert source is not None and source["path"] == "/d/f"
    assert len(seen["checkouts"]) == 1, seen
    assert [autocommit for _, autocommit in seen["statements"]] == [True], seen["statements"]


def test_a_lone_change_costs_one_read_before_its_request(
    coord: Coordinator, ns: str, database_url: str, es_url: str, alias: str
) -> None:
    """One notification, one read that finds the change, its request, and after the
    answer one read that finds nothing (no read beside the request, none after that)."""
    coord.create_file(ns, "/f", "x")
    with running_worker(database_url, es_url, alias, partitions=1, poll_interval=3600.0) as w:
        assert coord.wait_indexed(coord.create_file(ns, "/g", "").seq or 0, 30,
                                  consumer=consumer_for(alias))
        with traced(w.engine) as seen:
            quiet(seen)  # the runner is idle, waiting for a wake-up
            seen["statements"].clear()
            moved = coord.rename(ns, "/f", "h")
            assert coord.wait_indexed(moved.seq or 0, 30, consumer=consumer_for(alias))
            quiet(seen)  # whatever the runner does after the answer, it has done
    reads = [s for s, _ in seen["statements"] if s.startswith("SELECT last_value")]
    assert len(reads) == 2, seen["statements"]


def quiet(seen: dict[str, list[Any]], for_s: float = 0.5, at_most: float = 20.0) -> None:
    """Wait until no statement was traced for ``for_s`` seconds."""
    deadline = time.monotonic() + at_most
    count = -1
    while count != len(seen["statements"]) and time.monotonic() < deadline:
        count = len(seen["statements"])
        time.sleep(for_s)


def test_notifications_during_reads_are_not_lost(
    coord: Coordinator, database_url: str, es_url: str, es: SearchEngine, alias: str
) -> None:
    """Writers in several namespaces (partitions) change files as fast as they can while
    the worker reads; its poll is an hour away, so only notifications wake its runners:
    once the writers stop, each runner must still catch up with the last change, whose
    notification may have arrived while it was reading the one before."""
    namespaces = [f"n{k}" for k in range(6)]
    for name in namespaces:
        coord.create_namespace(name)
        coord.create_file(name, "/f", "0")
    with running_worker(database_url, es_url, alias, partitions=4, poll_interval=3600.0):
        assert coord.wait_indexed(coord.create_file(namespaces[0], "/g", "").seq or 0, 30,
                                  consumer=consumer_for(alias))
        stop = time.monotonic() + 3.0
        last: dict[str, int] = {}
        content: dict[str, str] = {}
        errors: list[BaseException] = []

        def writer(name: str) -> None:
            try:
                i = 0
                while time.monotonic() < stop:
                    i += 1
                    last[name] = coord.write_file(name, "/f", str(i)).seq or 0
                    content[name] = str(i)
                    time.sleep(0.001 * (i % 3))  # some back to back, some just apart
            except BaseException as exc:  # the test fails with it below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(name,)) for name in namespaces]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert coord.wait_indexed(max(last.values()), 15, consumer=consumer_for(alias)), \
            "a runner slept through a notification"
        for name in namespaces:
            node = coord.stat(name, "/f")
            got = es.get(index=alias, id=node.id, routing=name, realtime=True)
            assert int(got["_source"]["seq"]) >= last[name]
            assert got["_source"]["content"] == content[name]
