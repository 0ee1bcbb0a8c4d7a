"""A lone change's way to the index costs one wake-up, one read and one small request:
the read is one connection, three statements (the bound's two, the select) in two
round trips (the bound's two pipelined), or in one when the runner expects a lone change
(the select read ahead in the same pipeline); the node fetch is one statement in
autocommit; and a notification that arrives while a runner reads is never lost (real
concurrent writers, no poll to catch up with)."""

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
from coordinator.db import Driver
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
    was in autocommit: no BEGIN and COMMIT around it), through SQLAlchemy or straight
    through the driver (``coordinator.db.Driver``), every pool checkout, and the round
    trips: a statement sent alone is one, the statements of one driver pipeline are one
    together (sent at once, answered at its end)."""
    seen: dict[str, list[Any]] = {"statements": [], "checkouts": [], "round_trips": []}
    in_pipeline = [False]

    def record(statement: str, autocommit: bool) -> None:
        text_ = " ".join(statement.split())[:60]
        seen["statements"].append((text_, autocommit))
        if in_pipeline[0]:
            seen["round_trips"][-1].append(text_)
        else:
            seen["round_trips"].append([text_])

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        record(statement, conn.connection.dbapi_connection.autocommit)

    def on_checkout(*args: Any) -> None:
        seen["checkouts"].append(1)

    send, pipeline = Driver.send, Driver.pipeline

    def traced_send(self: Driver, sql: str, params: Any) -> Any:
        record(sql, self.raw.autocommit)
        return send(self, sql, params)

    @contextmanager
    def traced_pipeline(self: Driver) -> Iterator[None]:
        seen["round_trips"].append([])
        in_pipeline[0] = True
        try:
            with pipeline(self):
                yield
        finally:
            in_pipeline[0] = False

    event.listen(engine, "before_cursor_execute", on_execute)
    event.listen(engine, "checkout", on_checkout)
    Driver.send = traced_send  # type: ignore[method-assign]
    Driver.pipeline = traced_pipeline  # type: ignore[method-assign,assignment]
    try:
        yield seen
    finally:
        Driver.send, Driver.pipeline = send, pipeline  # type: ignore[method-assign]
        event.remove(engine, "before_cursor_execute", on_execute)
        event.remove(engine, "checkout", on_checkout)


def test_a_read_with_nothing_in_flight_is_one_connection_three_statements_two_round_trips(
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
    # The bound's two statements in one round trip, in their order; the select after.
    assert [len(trip) for trip in seen["round_trips"]] == [2, 1], seen["round_trips"]
    first, second = seen["round_trips"][0]
    assert first.startswith("SELECT last_value"), seen["round_trips"]  # step 1: the sequence
    assert second.startswith("WITH l AS MATERIALIZED"), seen["round_trips"]  # step 2


@pytest.mark.parametrize("read_ahead", [False, True])
def test_the_horizon_read_with_the_events_still_refuses_a_compacted_cursor(
    coord: Coordinator, ns: str, read_ahead: bool
) -> None:
    coord.create_file(ns, "/f", "x")
    moved = coord.rename(ns, "/f", "g")
    assert moved.seq is not None
    # A compaction's horizon, committed before the read: events after cursor 0 are gone.
    with coord.engine.begin() as conn:
        conn.execute(text("INSERT INTO log_horizon (id, position, snapshot_id) "
                          "VALUES (1, :p, 0)"), {"p": moved.seq - 1})
    with pytest.raises(CursorExpired):
        coord.read_events(after=0, read_ahead=read_ahead)
    events, _ = coord.read_events(after=moved.seq - 1, read_ahead=read_ahead)
    assert [e.position for e in events] == [moved.seq]


def test_a_read_ahead_with_nothing_in_flight_is_one_round_trip(
    coord: Coordinator, ns: str
) -> None:
    coord.create_file(ns, "/f", "x")
    _, cursor = coord.read_events(after=0)
    moved = coord.rename(ns, "/f", "g")
    timings: dict[str, float] = {}
    with traced(coord.engine) as seen:
        events, after = coord.read_events(after=cursor, partition=Partition(0, 1),
                                          read_ahead=True, timings=timings)
    assert [e.position for e in events] == [moved.seq]
    assert after >= (moved.seq or 0)
    assert timings["read_ahead"] == 1
    assert len(seen["checkouts"]) == 1, seen
    assert all(autocommit for _, autocommit in seen["statements"]), seen["statements"]
    # The sequence, the position lock's holders and the events: sent at once, in order.
    assert [len(trip) for trip in seen["round_trips"]] == [3], seen["round_trips"]
    first, second, third = seen["round_trips"][0]
    assert first.startswith("SELECT last_value"), seen["round_trips"]
    assert second.startswith("WITH l AS MATERIALIZED"), seen["round_trips"]
    assert third.startswith("SELECT position"), seen["round_trips"]


def test_a_read_ahead_under_a_higher_default_isolation_is_read_again(
    coord: Coordinator, ns: str, database_url: str
) -> None:
    """A database whose default isolation is REPEATABLE READ runs a pipeline's
    statements under the snapshot of the first: a select read ahead there could miss a
    writer that committed between the bound's two steps. Its rows are not used; the
    select is sent again, in a transaction of its own."""
    dbname = coord.engine.url.database
    with coord.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f'ALTER DATABASE "{dbname}" '
                          "SET default_transaction_isolation = 'repeatable read'"))
    coord.engine.dispose()  # new sessions take the database's default
    coord.create_file(ns, "/f", "x")
    _, cursor = coord.read_events(after=0)
    moved = coord.rename(ns, "/f", "g")
    timings: dict[str, float] = {}
    with traced(coord.engine) as seen:
        events, _ = coord.read_events(after=cursor, read_ahead=True, timings=timings)
    assert [e.position for e in events] == [moved.seq]
    assert timings["read_ahead"] == 0
    assert [len(trip) for trip in seen["round_trips"]] == [3, 1], seen["round_trips"]


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
