"""Issue 6: atomic groups (``Coordinator.transaction``, ``apply``, ``run``).

Every test runs against the real PostgreSQL of ``conftest.py``. Concurrency
claims use real threads with their own pooled connections; the crash claim
kills a real client process with SIGKILL.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import psycopg
import pytest
from sqlalchemy.exc import DBAPIError

from coordinator import (
    AlreadyExists,
    Conflict,
    Coordinator,
    Event,
    GroupTx,
    NotFound,
    TooLarge,
)
from coordinator.commands import Command, CreateFile, Mkdir, Move, Rename, WriteFile
from coordinator.db import libpq_url
from coordinator.results import POSITION_BLOCK
from coordinator.unit_of_work import UnitOfWork

#: What a tree looks like, ids left out so trees in different namespaces compare.
Tree = list[tuple[str, str, str | None, dict[str, Any], int]]


def tree(coord: Coordinator, ns: str) -> Tree:
    return [(n.path, n.kind, n.content, n.metadata, n.version) for n in coord.walk(ns)]


def cursor_now(coord: Coordinator) -> int:
    """A cursor past every event committed so far."""
    cursor: int | None = None
    while True:
        events, cursor = coord.read_events(cursor, limit=10_000)
        if not events:
            return cursor


def events_after(coord: Coordinator, cursor: int, ns: str) -> list[Event]:
    events, _ = coord.read_events(cursor, limit=10_000, namespaces=[ns])
    return events


def committed_events_after(database_url: str, cursor: int) -> int:
    """How many event rows past ``cursor`` another session can see right now."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM events WHERE position > %s", (cursor,)).fetchone()
        assert row is not None
        return int(row[0])


def assert_one_block(events: Sequence[Event]) -> None:
    """The events are consecutive positions of a single transaction's block."""
    assert events
    first = events[0].position
    assert [e.position for e in events] == list(range(first, first + len(events)))
    assert {e.transaction_block for e in events} == {first // POSITION_BLOCK}


# ------------------------------------------------------------------ 1. semantics


def test_each_operation_sees_the_previous_ones_and_others_see_nothing_until_commit(
    coord: Coordinator, ns: str, database_url: str
) -> None:
    coord.mkdir(ns, "/a")
    coord.create_file(ns, "/a/keep", "k")
    cursor = cursor_now(coord)

    with coord.transaction(ns) as tx:
        tx.rename("/a", "b")
        tx.create_file("/b/x", "hello", {"owner": "qa"})  # under the new name
        tx.mkdir("/b/sub/deeper", parents=True)  # one op, two events
        # Reads inside the group see its uncommitted changes.
        assert tx.stat("/b/x").content == "hello"
        assert [n.name for n in tx.listdir("/b")] == ["keep", "sub", "x"]
        assert tx.get(tx.stat("/b/sub").id).path == "/b/sub"
        with pytest.raises(NotFound):
            tx.stat("/a")
        # Another session (a second pooled connection) sees the old tree.
        assert [p for p, *_ in tree(coord, ns)] == ["/", "/a", "/a/keep"]
        with pytest.raises(NotFound):
            coord.stat(ns, "/b")
        # Not read_events here: it would wait for this very transaction to end.
        assert committed_events_after(database_url, cursor) == 0

    assert [p for p, *_ in tree(coord, ns)] == [
        "/", "/b", "/b/keep", "/b/sub", "/b/sub/deeper", "/b/x"
    ]
    events = events_after(coord, cursor, ns)
    assert [(e.type, e.payload["path"]) for e in events] == [
        ("moved", "/b"),
        ("created", "/b/x"),
        ("created", "/b/sub"),
        ("created", "/b/sub/deeper"),
    ]
    assert_one_block(events)
    # Each result's seq is the position of its (last) event, in op order.
    assert [r.seq for r in tx.results] == [
        events[0].position, events[1].position, events[3].position
    ]


def test_apply_and_run_return_results_in_op_order_from_one_block(
    coord: Coordinator, ns: str
) -> None:
    coord.mkdir(ns, "/plans/p1", parents=True)
    cursor = cursor_now(coord)
    results = coord.apply(ns, [
        Rename("/plans/p1", "p2"),
        CreateFile("/plans/p2/record.json", "{}", metadata={"v": 1}),
        WriteFile("/plans/p2/record.json", "{}", {"v": 2}, if_version=1),
    ])
    assert [r.node.path for r in results] == [
        "/plans/p2", "/plans/p2/record.json", "/plans/p2/record.json"
    ]
    assert results[2].node.metadata == {"v": 2}
    ran = coord.run(ns, lambda u: [u.tree.mkdir("/plans/p2/s1"), u.tree.delete("/plans/p2/s1")])
    events = events_after(coord, cursor, ns)
    assert [e.position for e in events] == [r.seq for r in [*results, *ran]]
    assert_one_block(events[:3])
    assert_one_block(events[3:])
    assert events[2].transaction_block < events[3].transaction_block


def test_an_exception_in_the_block_rolls_back_everything(coord: Coordinator, ns: str) -> None:
    coord.mkdir(ns, "/a")
    coord.create_file(ns, "/a/f", "v1")
    before, cursor = tree(coord, ns), cursor_now(coord)

    with pytest.raises(RuntimeError, match="boom"):
        with coord.transaction(ns) as tx:
            tx.rename("/a", "b")
            tx.write_file("/b/f", "v2")
            tx.mkdir("/c")
            raise RuntimeError("boom")

    assert tree(coord, ns) == before
    assert events_after(coord, cursor, ns) == []
    # The log is being read correctly: the next change does show up.
    coord.mkdir(ns, "/d")
    assert [e.type for e in events_after(coord, cursor, ns)] == ["created"]


# ------------------------------------------------------------- 2. all or nothing


def test_a_group_whose_last_operation_fails_leaves_no_trace(coord: Coordinator, ns: str) -> None:
    coord.mkdir(ns, "/docs")
    coord.create_file(ns, "/docs/f1", "one")
    coord.create_file(ns, "/docs/f2", "two")
    before, cursor = tree(coord, ns), cursor_now(coord)

    ops = [
        Mkdir("/archive"),
        Move("/docs/f1", "/archive/f1"),
        Rename("/docs", "docs-old"),
        WriteFile("/docs-old/f2", "changed"),
        # Fails only because of the second operation of the same group.
        CreateFile("/archive/f1", "clash"),
    ]

    def with_block() -> None:
        with coord.transaction(ns) as tx:
            for op in ops:
                tx.execute(op)

    def with_run() -> None:
        coord.run(ns, lambda u: [
            u.tree.mkdir("/archive"), u.tree.move("/docs/f1", "/archive/f1"),
            u.tree.rename("/docs", "docs-old"), u.tree.write_file("/docs-old/f2", "changed"),
            u.tree.create_file("/archive/f1", "clash"),
        ])

    for attempt in (lambda: coord.apply(ns, ops), with_block, with_run):
        with pytest.raises(AlreadyExists):
            attempt()
        assert tree(coord, ns) == before
        assert events_after(coord, cursor, ns) == []

    # Without the failing step the same group commits, as one block.
    coord.apply(ns, ops[:-1])
    assert [p for p, *_ in tree(coord, ns)] == [
        "/", "/archive", "/archive/f1", "/docs-old", "/docs-old/f2"
    ]
    events = events_after(coord, cursor, ns)
    assert [e.type for e in events] == ["created", "moved", "moved", "written"]
    assert_one_block(events)


# --------------------------------------------------- 3. readers see whole groups


def test_a_reader_never_sees_part_of_a_group(coord: Coordinator, ns: str) -> None:
    writers, groups_each, group_size = 3, 20, 4
    for w in range(writers):
        coord.mkdir(ns, f"/w{w}")
    start = cursor_now(coord)
    writers_done = threading.Event()
    last_seqs: list[int] = []  # list.append is atomic; a shared max() would race
    batches: list[list[Event]] = []
    failures: list[BaseException] = []

    def write(w: int) -> None:
        try:
            for g in range(groups_each):
                results = coord.apply(ns, [
                    Mkdir(f"/w{w}/g{g}"),
                    CreateFile(f"/w{w}/g{g}/f", "x"),
                    WriteFile(f"/w{w}/g{g}/f", "y"),
                    Rename(f"/w{w}/g{g}", f"h{g}"),
                ])
                last_seqs.append(results[-1].seq or 0)
        except BaseException as exc:
            failures.append(exc)

    def read() -> None:
        cursor = start
        try:
            # limit=1 asks for less than a group: the reader must still get whole groups.
            while not (writers_done.is_set() and cursor >= max(last_seqs)):
                events, cursor = coord.read_events(cursor, limit=1, namespaces=[ns])
                if events:
                    batches.append(events)
        except BaseException as exc:
            failures.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writers_done.set()
    reader.join(timeout=60)
    assert not reader.is_alive()
    assert failures == []

    final = events_after(coord, start, ns)
    assert len(final) == writers * groups_each * group_size
    for batch in batches:
        sizes = Counter(e.transaction_block for e in batch)
        assert set(sizes.values()) == {group_size}, sizes
    # Nothing skipped, nothing twice, in position order: the live reader matched a full read.
    assert [e.position for b in batches for e in b] == [e.position for e in final]
    assert len(batches) > 1  # the reader really ran while groups were committing


# ----------------------------------------------- 4. opposite lock orders, deadlocks

SETUP = [
    Mkdir("/x"),
    Mkdir("/y"),
    Mkdir("/z"),
    Mkdir("/p"),
    Mkdir("/q"),
    CreateFile("/x/f1", "f1"),
    CreateFile("/y/f2", "f2"),
    *[CreateFile(f"/{d}/{d}{i}", "") for d in "pq" for i in range(3)],
]


def opposing_groups(coord: Coordinator, ns: str) -> tuple[list[Command], list[Command]]:
    """Two groups that lock f1 and f2 in opposite orders, with private writes in between
    to widen the window. By id, so both succeed in either serial order, with different
    results (f1 ends in /z or /y; f2 holds "g2" or "g1")."""
    f1, f2 = coord.stat(ns, "/x/f1").id, coord.stat(ns, "/y/f2").id
    g1 = [
        Move(f1, "/y/f1"),  # FOR UPDATE on f1
        *[WriteFile(f"/p/p{i}", "g1") for i in range(3)],
        WriteFile(f2, "g1"),  # FOR NO KEY UPDATE on f2
    ]
    g2 = [
        WriteFile(f2, "g2"),
        *[WriteFile(f"/q/q{i}", "g2") for i in range(3)],
        Move(f1, "/z/f1"),
    ]
    return g1, g2


def setup_namespace(coord: Coordinator, ns: str) -> None:
    coord.create_namespace(ns)
    coord.apply(ns, SETUP)


def serial_outcomes(coord: Coordinator) -> dict[str, Tree]:
    """The final tree of each serial order, and of each group alone."""
    outcomes = {}
    for name, order in (("g1,g2", (0, 1)), ("g2,g1", (1, 0)), ("g1", (0,)), ("g2", (1,))):
        ns = "serial-" + name.replace(",", "-")
        setup_namespace(coord, ns)
        groups = opposing_groups(coord, ns)
        for i in order:
            coord.apply(ns, groups[i])
        outcomes[name] = tree(coord, ns)
    assert len({repr(t) for t in outcomes.values()}) == 4
    return outcomes


def deadlocks_so_far(database_url: str) -> int:
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        assert row is not None
        return int(row[0])


def run_pair(bodies: Sequence[Callable[[], object]]) -> list[BaseException | None]:
    """Run the callables in two threads released together; each one's exception or None."""
    barrier = threading.Barrier(len(bodies))
    errors: list[BaseException | None] = [None] * len(bodies)

    def worker(i: int) -> None:
        barrier.wait(timeout=30)
        try:
            bodies[i]()
        except BaseException as exc:
            errors[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive()
    return errors


def test_opposing_groups_with_apply_never_surface_a_deadlock(database_url: str) -> None:
    rounds = 30
    # Our own coordinator: closing it ends its sessions, which flushes their statistics.
    with Coordinator.connect(database_url, lock_timeout=5.0) as coord:
        expected = serial_outcomes(coord)
        for r in range(rounds):
            setup_namespace(coord, f"r{r}")
        deadlocks_before = deadlocks_so_far(database_url)
        orders: Counter[str] = Counter()
        for r in range(rounds):
            ns = f"r{r}"
            g1, g2 = opposing_groups(coord, ns)
            errors = run_pair([partial(coord.apply, ns, g1), partial(coord.apply, ns, g2)])
            assert errors == [None, None]
            final = tree(coord, ns)
            matches = [name for name in ("g1,g2", "g2,g1") if expected[name] == final]
            assert len(matches) == 1, final
            orders[matches[0]] += 1
    # PostgreSQL counts the deadlocks it broke; poll until the closed sessions reported.
    deadline = time.monotonic() + 10
    while deadlocks_so_far(database_url) == deadlocks_before and time.monotonic() < deadline:
        time.sleep(0.05)
    deadlocks = deadlocks_so_far(database_url) - deadlocks_before
    print(f"\n{rounds} rounds: serial orders {dict(orders)}, deadlocks broken {deadlocks}")
    assert deadlocks > 0  # the test exercised the retry, not just lucky timing


def deadlocking_bodies(
    g1: list[Command], g2: list[Command]
) -> tuple[Callable[[Any], None], Callable[[Any], None], list[int]]:
    """Group bodies that, on their first run, wait for each other after their first
    operation: both hold their first row lock, so their second locks always deadlock."""
    calls = [0, 0]
    barrier = threading.Barrier(2)

    def body(i: int, ops: list[Command], tx: Any) -> None:
        calls[i] += 1
        tx.execute(ops[0])
        if calls[i] == 1:
            barrier.wait(timeout=30)
        for op in ops[1:]:
            tx.execute(op)

    return (lambda tx: body(0, g1, tx)), (lambda tx: body(1, g2, tx)), calls


def as_group(body: Callable[[Any], None]) -> Callable[[UnitOfWork], None]:
    """A group body run by ``Coordinator.run``, which re-runs it on a deadlock."""
    return lambda uow: body(GroupTx(uow.tree, 1000))


def test_run_reruns_the_deadlock_victim_as_a_whole(coord: Coordinator) -> None:
    expected = serial_outcomes(coord)
    for r in range(3):
        ns = f"run{r}"
        setup_namespace(coord, ns)
        g1, g2 = opposing_groups(coord, ns)
        b1, b2, calls = deadlocking_bodies(g1, g2)
        cursor = cursor_now(coord)
        errors = run_pair([partial(coord.run, ns, as_group(b1)),
                           partial(coord.run, ns, as_group(b2))])
        assert errors == [None, None]
        # A real deadlock every time: at least one victim re-ran. On an idle machine the
        # victim's quick retry can deadlock the survivor too, so both may re-run; what is
        # promised is that each group commits exactly once, whole, in one serial order.
        assert min(calls) >= 1 and max(calls) >= 2, calls
        blocks = Counter(e.transaction_block for e in events_after(coord, cursor, ns))
        assert sorted(blocks.values()) == sorted([len(g1), len(g2)])
        got = tree(coord, ns)
        assert got in (expected["g1,g2"], expected["g2,g1"])


def test_a_deadlock_in_a_transaction_block_is_a_typed_conflict(coord: Coordinator) -> None:
    expected = serial_outcomes(coord)
    setup_namespace(coord, "blk")
    b1, b2, calls = deadlocking_bodies(*opposing_groups(coord, "blk"))

    def in_block(body: Callable[[Any], None]) -> None:
        with coord.transaction("blk") as tx:
            body(tx)

    errors = run_pair([lambda: in_block(b1), lambda: in_block(b2)])
    assert calls == [1, 1]  # a block is never re-run for the caller
    assert errors.count(None) == 1
    victim = next(e for e in errors if e is not None)
    assert isinstance(victim, Conflict), repr(victim)
    cause = victim.__cause__
    assert isinstance(cause, DBAPIError)
    assert getattr(cause.orig, "sqlstate", None) == "40P01"
    # Only the survivor's group is in the tree.
    assert tree(coord, "blk") == expected["g1" if errors[0] is None else "g2"]


# ----------------------------------------------------- 5. seed 003: kill -9 mid-group

CHILD = """
import sys
from coordinator import Coordinator

# Idle-in-transaction timeout far beyond the test: only the kill can free the locks.
with Coordinator.connect(sys.argv[1], idle_in_transaction_timeout=600.0) as coord:
    with coord.transaction("t") as tx:
        tx.rename("/plans/p1", "p1-new")
        print("renamed", flush=True)
        sys.stdin.read()  # blocks until the parent kills us
        tx.write_file("/plans/p1.json", "{}", {"name": "p1-new", "root": "/plans/p1-new"})
"""


def test_kill_9_in_the_middle_of_a_plan_rename_leaves_nothing(
    coord: Coordinator, ns: str, database_url: str
) -> None:
    coord.apply(ns, [
        Mkdir("/plans/p1/suite-a/suite-b", parents=True),
        Mkdir("/plans/p1/suite-c"),
        CreateFile("/plans/p1/suite-a/suite-b/case-1", "steps"),
        CreateFile("/plans/p1.json", "{}", {"name": "p1", "root": "/plans/p1"}),
    ])
    before, cursor = tree(coord, ns), cursor_now(coord)

    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, database_url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 30)
        assert ready and child.stdout.readline() == "renamed\n"
        # Mid-group: others see the old tree, and the plan root is locked by the child.
        assert tree(coord, ns) == before
        with Coordinator.connect(database_url, lock_timeout=0.2) as impatient:
            with pytest.raises(Conflict):
                impatient.rename(ns, "/plans/p1", "other")
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()
    assert child.returncode == -signal.SIGKILL

    assert tree(coord, ns) == before
    assert events_after(coord, cursor, ns) == []
    # No stuck lock: the rename goes through at once (lock_timeout is 5 s, the dead
    # session's idle timeout 600 s), and so does the whole group.
    started = time.monotonic()
    coord.apply(ns, [
        Rename("/plans/p1", "p1-new"),
        WriteFile("/plans/p1.json", "{}", {"name": "p1-new",
                                                            "root": "/plans/p1-new"}),
    ])
    assert time.monotonic() - started < 5
    assert coord.stat(ns, "/plans/p1-new/suite-a/suite-b/case-1").content == "steps"
    assert coord.stat(ns, "/plans/p1.json").metadata["root"] == "/plans/p1-new"
    events = events_after(coord, cursor, ns)
    assert [e.type for e in events] == ["moved", "written"]
    assert_one_block(events)


# --------------------------------------------------------------------- 6. limits


def test_a_group_over_max_group_ops_is_too_large_and_leaves_nothing(
    database_url: str, coord: Coordinator, ns: str
) -> None:
    before, cursor = tree(coord, ns), cursor_now(coord)
    ops = [Mkdir(f"/d{i}") for i in range(6)]
    with Coordinator.connect(database_url, max_group_ops=5) as small:
        with pytest.raises(TooLarge) as info:
            small.apply(ns, ops)
        assert info.value.code == "too_large"
        with pytest.raises(TooLarge):
            with small.transaction(ns) as tx:
                for op in ops:
                    tx.execute(op)
        assert tree(coord, ns) == before
        assert events_after(coord, cursor, ns) == []
        # Exactly the limit is fine, in both forms.
        assert len(small.apply(ns, ops[:5])) == 5
        with small.transaction(ns) as tx:
            for i in range(5):
                tx.mkdir(f"/e{i}")
    assert len(events_after(coord, cursor, ns)) == 10
