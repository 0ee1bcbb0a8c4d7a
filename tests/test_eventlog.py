"""The event log is gap-safe: a reader never moves past a position below which an event
can still commit, reads whole transactions only, and is not blocked by holes."""

from __future__ import annotations

import functools
import random
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from sqlalchemy import text
from tree_checks import node_rows, run_threads, wait_for_lock_waiter

from coordinator import Coordinator, Event
from coordinator.db import libpq_url
from coordinator.event_appender import POSITION_LOCK_SQL, TAKE_BLOCK_SQL
from coordinator.event_reader import safe_bound
from coordinator.events import Created, Written
from coordinator.results import POSITION_BLOCK
from coordinator.tree import TreeTx
from coordinator.unit_of_work import UnitOfWork
from pathkeeper.local.postgres import LocalPostgres

SHORT = 0.2  # how long a read may wait for in-flight transactions in "must see nothing" checks


def positions(events: list[Event]) -> list[int]:
    return [e.position for e in events]


def read_all(
    coord: Coordinator, after: int | None = None, read_ahead: bool = False
) -> tuple[list[Event], int]:
    """Everything safe to read now, following the cursor to the end."""
    out: list[Event] = []
    cursor = after
    while True:
        batch, nxt = coord.read_events(after=cursor, limit=500, wait=10.0,
                                       read_ahead=read_ahead)
        out += batch
        if not batch and nxt == (cursor or 0):
            return out, nxt
        cursor = nxt


def take_position_then(tx: TreeTx, *paths: str) -> None:
    """Make directories, then take the transaction's block of positions now (the unit of
    work would do it as its last statement before COMMIT): from here until the commit
    the transaction holds positions that no reader can see yet."""
    for path in paths:
        tx.mkdir(path)
    tx.events.flush()


# Each read with the bound's steps first, then the select; and with the select read
# ahead in the bound's round trip (its rows used only when no writer was in flight).
READ_AHEAD = pytest.mark.parametrize("read_ahead", [False, True],
                                     ids=["bound-then-select", "read-ahead"])


@READ_AHEAD
def test_transaction_that_took_its_position_first_commits_last(
    coord: Coordinator, read_ahead: bool
) -> None:
    coord.create_namespace("t")
    _, start = read_all(coord, read_ahead=read_ahead)
    a_holds_position = threading.Event()
    a_may_commit = threading.Event()

    def transaction_a() -> None:
        def body(uow: UnitOfWork) -> None:
            tx = uow.tree
            take_position_then(tx, "/a1", "/a2")
            a_holds_position.set()
            assert a_may_commit.wait(30)

        coord.run("t", body)

    worker = threading.Thread(target=transaction_a, daemon=True)
    worker.start()
    assert a_holds_position.wait(30)
    b = coord.mkdir("t", "/b")  # commits now, with a higher position than A's
    assert b.seq is not None
    # B is committed, but A (lower position) is still open: B must not be handed out,
    # or a reader would move its cursor past A's position and never see A.
    events, cursor = coord.read_events(read_ahead=read_ahead, after=start, wait=SHORT)
    assert events == []
    assert cursor == start
    a_may_commit.set()
    worker.join(30)
    events, cursor = coord.read_events(read_ahead=read_ahead, after=cursor, wait=10.0)
    assert [(e.type, e.payload["path"]) for e in events] == [
        ("created", "/a1"), ("created", "/a2"), ("created", "/b")
    ]
    assert positions(events) == sorted(positions(events))
    assert events[-1].position == b.seq
    assert cursor >= b.seq


@READ_AHEAD
def test_open_transaction_with_the_newest_id_is_not_skipped(
    coord: Coordinator, read_ahead: bool
) -> None:
    """The open transaction has the newest transaction id (nothing committed after it
    got its id): a snapshot's in-progress list omits such a transaction, and a reader
    that trusted it moved its cursor past the open block and lost its events."""
    coord.create_namespace("t")
    _, start = read_all(coord, read_ahead=read_ahead)
    early = coord.mkdir("t", "/early")
    seen: list[tuple[list[Event], int]] = []

    def body(uow: UnitOfWork) -> None:
        tx = uow.tree
        take_position_then(tx, "/open")
        # A separate client: the reader waits briefly for the open transaction, then gives
        # up and returns what is already safe (nothing past the open block).
        seen.append(coord.read_events(read_ahead=read_ahead, after=start, wait=SHORT))

    coord.run("t", body)
    events, cursor = seen[0]
    assert positions(events) in ([], [early.seq])
    assert all(e.payload["path"] != "/open" for e in events)
    events2, _ = coord.read_events(read_ahead=read_ahead, after=cursor, wait=10.0)
    assert [e.payload["path"] for e in events + events2] == ["/early", "/open"]


@READ_AHEAD
def test_group_is_never_split_between_reads(coord: Coordinator, read_ahead: bool) -> None:
    coord.create_namespace("t")
    _, start = read_all(coord, read_ahead=read_ahead)
    with coord.transaction("t") as g:
        for i in range(5):
            g.mkdir(f"/g{i}")
    coord.mkdir("t", "/after")
    events, cursor = coord.read_events(read_ahead=read_ahead, after=start, limit=1, wait=10.0)
    assert [e.payload["path"] for e in events] == [f"/g{i}" for i in range(5)]
    assert len({e.transaction_block for e in events}) == 1
    events, cursor = coord.read_events(read_ahead=read_ahead, after=cursor, limit=1, wait=10.0)
    assert [e.payload["path"] for e in events] == ["/after"]


def test_rolled_back_transaction_leaves_a_hole_that_never_blocks(coord: Coordinator) -> None:
    coord.create_namespace("t")
    _, start = read_all(coord)
    def body(uow: UnitOfWork) -> None:
        tx = uow.tree
        take_position_then(tx, "/lost")  # takes a block of positions, then rolls back
        raise RuntimeError("abandon")

    with pytest.raises(RuntimeError):
        coord.run("t", body)
    kept = coord.mkdir("t", "/kept")
    # If the hole were waited for, this read would time out and return nothing.
    events, _ = coord.read_events(after=start, wait=5.0)
    assert [(e.position, e.payload["path"]) for e in events] == [(kept.seq, "/kept")]
    assert kept.seq is not None and kept.seq - start > POSITION_BLOCK  # there is a hole


@READ_AHEAD
def test_write_storm_live_reader_matches_final_read(coord: Coordinator, read_ahead: bool) -> None:
    """Writers take a position, pause a random while, then commit (or roll back); a live
    reader follows the whole time. It must see exactly what a final full read sees."""
    coord.create_namespace("t")
    writers, per_writer = 6, 25
    stop = threading.Event()
    live: list[Event] = []
    committed: list[int] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        rng = random.Random(w)
        for i in range(per_writer):

            def body(uow: UnitOfWork, i: int = i) -> int:
                tx = uow.tree
                first = tx.mkdir(f"/w{w}-{i}")
                if rng.random() < 0.3:
                    tx.create_file(f"/w{w}-{i}/f")
                tx.events.flush()
                time.sleep(rng.random() * 0.02)  # the hazard: position taken, not committed
                if rng.random() < 0.1:
                    raise KeyError("roll back")
                return int(first.seq or 0)

            try:
                seq = coord.run("t", body)
                with lock:
                    committed.append(seq)
            except KeyError:
                pass

    def reader() -> None:
        cursor: int | None = None
        while True:
            done = stop.is_set()  # read once more after the writers finished
            events, cursor = coord.read_events(after=cursor, limit=7, wait=1.0,
                                               read_ahead=read_ahead)
            live.extend(events)
            if done and not events:
                return

    reading = threading.Thread(target=reader, daemon=True)
    reading.start()
    run_threads([functools.partial(writer, w) for w in range(writers)], timeout=120)
    stop.set()
    reading.join(60)
    assert not reading.is_alive()
    final, _ = read_all(coord, read_ahead=read_ahead)
    assert positions(live) == positions(final)  # nothing skipped, nothing twice, same order
    assert positions(final) == sorted(set(positions(final)))
    firsts = {e.position for e in final if e.type == "created" and e.payload["kind"] == "dir"}
    assert set(committed) <= firsts
    assert len(committed) > writers * per_writer // 2
    # Every committed directory is in the log exactly once.
    dirs = [e.payload["path"] for e in final if e.type == "created" and e.payload["kind"] == "dir"]
    assert len(dirs) == len(set(dirs)) == len(committed)


@READ_AHEAD
def test_read_events_filters_and_until(coord: Coordinator, read_ahead: bool) -> None:
    coord.create_namespace("n1")
    coord.create_namespace("n2")
    a = coord.mkdir("n1", "/a")
    coord.mkdir("n2", "/b")
    c = coord.mkdir("n1", "/c")
    only_n1, _ = coord.read_events(read_ahead=read_ahead, namespaces=["n1"], wait=5.0)
    assert [e.type for e in only_n1] == ["namespace_created", "created", "created"]
    assert {e.namespace for e in only_n1} == {"n1"}
    upto, cursor = coord.read_events(read_ahead=read_ahead, until=a.seq, wait=5.0)
    assert positions(upto)[-1] == a.seq and cursor == a.seq
    assert c.seq is not None
    from coordinator import Partition

    parts = [coord.read_events(partition=Partition(i, 3), wait=5.0, read_ahead=read_ahead)[0]
             for i in range(3)]
    merged = sorted((e for p in parts for e in p), key=lambda e: e.position)
    assert positions(merged) == positions(read_all(coord, read_ahead=read_ahead)[0])
    for p in parts:  # a namespace lives in exactly one partition
        assert all({e.namespace for e in p}.isdisjoint({e.namespace for e in q})
                   for q in parts if q is not p)


def test_event_payloads_replay_the_tree_by_id(coord: Coordinator) -> None:
    """Applying the log in position order by ids (parent_id, name) rebuilds ``nodes``
    exactly, after a storm of concurrent single-operation changes."""
    coord.create_namespace("t")
    ids = [coord.mkdir("t", f"/d{i}").node.id for i in range(6)]
    root = coord.stat("t", "/").id

    def client(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(30):
            op = rng.random()
            try:
                if op < 0.4:
                    src, dst = rng.choice(ids), rng.choice([*ids, root])
                    coord.move("t", src, coord.get("t", dst).path.rstrip("/") + "/"
                               + coord.get("t", src).name)
                elif op < 0.8:
                    where = coord.get("t", rng.choice(ids)).path
                    coord.create_file("t", f"{where}/f{rng.randrange(50)}", "x")
                else:
                    d = coord.get("t", rng.choice(ids)).path
                    kids = coord.listdir("t", d)
                    files = [k for k in kids if not k.is_dir]
                    if files:
                        coord.delete("t", files[0].id)
            except Exception as exc:
                from coordinator import AlreadyExists, InvalidMove, NotFound

                if not isinstance(exc, (AlreadyExists, InvalidMove, NotFound)):
                    raise

    run_threads([functools.partial(client, s) for s in range(4)], timeout=120)
    events, _ = read_all(coord)
    tree: dict[str, tuple[str | None, str]] = {}
    for e in events:
        if e.namespace != "t":
            continue
        p: dict[str, Any] = e.payload
        if e.type == "namespace_created":
            tree[p["root_id"]] = (None, "")
        elif e.type in ("created", "moved"):
            assert e.type == "moved" or p["id"] not in tree
            assert p["parent_id"] in tree  # the parent exists at this point of the log
            tree[p["id"]] = (p["parent_id"], p["name"])
        elif e.type == "deleted":
            assert p["kind"] == "file"
            del tree[p["id"]]
    rows = {str(r[0]): (str(r[1]) if r[1] else None, r[2]) for r in node_rows(coord, "t")}
    assert tree == rows


def test_each_transaction_takes_one_block(coord: Coordinator) -> None:
    coord.create_namespace("t")
    r = coord.apply("t", [])
    assert r == []
    from coordinator import Mkdir

    res = coord.apply("t", [Mkdir("/x"), Mkdir("/x/y")])
    assert res[1].seq == res[0].seq + 1  # type: ignore[operator]
    with coord.engine.connect() as conn:
        xids = conn.execute(
            text("SELECT count(DISTINCT xid) FROM events WHERE position = ANY(:p)"),
            {"p": [res[0].seq, res[1].seq]},
        ).scalar_one()
    assert xids == 1


def test_block_statement_takes_id_then_lock_then_block(coord: Coordinator) -> None:
    """The writer's last statement must have its transaction id and the position lock
    before ``nextval`` (the reader's argument in coordinator/event_reader.py). Checked on the
    plan: ``pg_current_xact_id()`` is STABLE, and an unused stable column of a subquery
    is planned as NULL and never evaluated."""
    params = {"nss": ["t"], "nodes": [None], "types": ["created"], "payloads": ["{}"],
              "notify": False, "channel": "c"}
    with coord.engine.begin() as conn:
        plan = [r[0] for r in conn.execute(text("EXPLAIN VERBOSE " + TAKE_BLOCK_SQL.text),
                                           params)]
    text_plan = "\n".join(plan)
    assert "NULL::xid8" not in text_plan, text_plan

    def line_of(needle: str) -> int:
        return next(i for i, line in enumerate(plan) if needle in line)

    # A plan lists outer nodes first: evaluated later, printed earlier.
    # The shard fence comes first: no writer waits on a freeze holding the position lock.
    assert (line_of("nextval(") < line_of(POSITION_LOCK_SQL)
            < line_of("pg_current_xact_id()") < line_of("pathkeeper_check_placed(")), text_plan


# ------------------------------------------------------------------ ordering of dependent changes
# A transaction takes its block of positions as its last statement, after every lock
# wait: changes that build on each other come out in the order they happened.


def test_group_waiting_after_its_first_event_replays_in_order(coord: Coordinator) -> None:
    coord.create_namespace("t")
    y = coord.mkdir("t", "/y").node.id
    _, start = read_all(coord)
    renamed = threading.Event()

    def other() -> None:
        with coord.transaction("t") as g3:
            g3.rename(y, "y2")  # takes its position after the group below took its own
            renamed.set()
            wait_for_lock_waiter(coord)  # commit while the group waits for this row

    with coord.transaction("t") as g:
        g.mkdir("/x")
        worker = threading.Thread(target=other, daemon=True)
        worker.start()
        assert renamed.wait(30)
        g.rename(y, "z")  # waits for `other`, then renames y2 -> z
    worker.join(30)
    events, _ = read_all(coord, start)
    last_name = [e.payload["name"] for e in events if e.type == "moved"][-1]
    assert coord.get("t", y).name == "z"
    assert last_name == "z"  # replaying in position order must end where the tree is


def test_payload_paths_replay_in_position_order(coord: Coordinator) -> None:
    """A create that resolved its parent's path while a rename of an ancestor was still
    open commits first, so it comes first. (Payload paths are still as the writer
    resolved them: the eventlog docstring says why consumers derive paths from ids.)"""
    coord.create_namespace("t")
    coord.mkdir("t", "/d1/d2_3", parents=True)
    _, start = read_all(coord)
    with coord.transaction("t") as g:
        g.rename("/d1", "d1x")
        run_threads([lambda: coord.create_file("t", "/d1/d2_3/f")])
    events, _ = read_all(coord, start)
    paths: set[str] = {"/d1", "/d1/d2_3"}
    for e in events:
        if e.type == "moved":
            old, new = e.payload["old_path"], e.payload["path"]
            paths = {new + p[len(old):] if p == old or p.startswith(old + "/") else p
                     for p in paths}
        elif e.type == "created":
            paths.add(e.payload["path"])
    assert paths == {n.path for n in coord.walk("t")} - {"/"}


# ------------------------------------------------------------ whom the reader waits for
# The reader waits only for transactions that can still hold one of our positions: writers
# of this database that took the position lock. Other transactions of the same server, of
# this database on other tables, or prepared ones, must not hold back the log.


@contextmanager
def bystander(url: str, *statements: str, prepare: str | None = None) -> Iterator[int]:
    """A transaction on its own connection that holds a transaction id and stays open (or,
    with ``prepare``, stays prepared) until the block ends; yields its backend pid."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("BEGIN")
        for sql in statements:
            conn.execute(sql.encode())
        conn.execute("SELECT pg_current_xact_id()")
        pid = conn.info.backend_pid
        if prepare is not None:
            conn.execute(f"PREPARE TRANSACTION '{prepare}'".encode())
        try:
            yield pid
        finally:
            if prepare is not None:
                conn.execute(f"ROLLBACK PREPARED '{prepare}'".encode())
            else:
                conn.execute("ROLLBACK")


def assert_not_held_back(coord: Coordinator, start: int) -> None:
    """A change committed now is handed out at once (no wait for any bystander)."""
    made = coord.mkdir("t", f"/made-{uuid.uuid4().hex[:8]}")
    events, cursor = coord.read_events(after=start, wait=SHORT)
    assert positions(events) == [made.seq]
    assert made.seq is not None and cursor >= made.seq
    bound = safe_bound(coord.engine, wait=SHORT)
    assert bound is not None and bound >= made.seq


def test_a_transaction_in_another_database_does_not_hold_back_the_reader(
    coord: Coordinator, pg_cluster: LocalPostgres
) -> None:
    coord.create_namespace("t")
    _, start = read_all(coord)
    other = pg_cluster.create_database(f"bystander_{uuid.uuid4().hex[:12]}")
    with bystander(other, "CREATE TABLE elsewhere (x int)", "INSERT INTO elsewhere VALUES (1)"):
        assert_not_held_back(coord, start)


def test_a_transaction_on_an_unrelated_table_of_ours_does_not_hold_back_the_reader(
    coord: Coordinator, database_url: str
) -> None:
    coord.create_namespace("t")
    _, start = read_all(coord)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE unrelated (x int)")
    with bystander(database_url, "INSERT INTO unrelated VALUES (1)"):
        assert_not_held_back(coord, start)


def test_a_prepared_transaction_does_not_hold_back_the_reader(
    coord: Coordinator, database_url: str
) -> None:
    coord.create_namespace("t")
    _, start = read_all(coord)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE unrelated (x int)")
    gid = f"bystander-{uuid.uuid4().hex[:12]}"
    with bystander(database_url, "INSERT INTO unrelated VALUES (1)", prepare=gid):
        assert_not_held_back(coord, start)


def test_a_writer_holding_its_block_is_waited_for_and_bystanders_are_not(
    coord: Coordinator, database_url: str, pg_cluster: LocalPostgres
) -> None:
    """The same hazard as the first test of this file (a block taken, not yet committed,
    while a later writer commits), with bystanders open all along: the reader still
    waits for the writer, and only for it."""
    coord.create_namespace("t")
    _, start = read_all(coord)
    other = pg_cluster.create_database(f"bystander_{uuid.uuid4().hex[:12]}")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE unrelated (x int)")
    holds_block = threading.Event()
    may_commit = threading.Event()

    def writer() -> None:
        def body(uow: UnitOfWork) -> None:
            tx = uow.tree
            take_position_then(tx, "/a")
            holds_block.set()
            assert may_commit.wait(30)

        coord.run("t", body)

    with bystander(other, "SELECT 1"), bystander(database_url, "INSERT INTO unrelated VALUES (1)"):
        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        assert holds_block.wait(30)
        b = coord.mkdir("t", "/b")
        events, cursor = coord.read_events(after=start, wait=SHORT)
        assert events == [] and cursor == start  # /a's block is below /b's and still open
        may_commit.set()
        thread.join(30)
        assert not thread.is_alive()
        events, cursor = coord.read_events(after=start, wait=5.0)
    assert [e.payload["path"] for e in events] == ["/a", "/b"]
    assert b.seq is not None and cursor >= b.seq


# ------------------------------------------------------------------ block, COMMIT and wake-up
# A unit of work without hooks sends its block statement, COMMIT and the wake-up at once.


def test_wake_up_follows_the_commit_in_the_same_round_trip(
    coord: Coordinator, database_url: str
) -> None:
    coord.create_namespace("t")
    with psycopg.connect(libpq_url(database_url), autocommit=True) as listener:
        row = listener.execute("SELECT hashtext('t')::bigint & 2147483647").fetchone()
        assert row is not None
        listener.execute("LISTEN pathkeeper_events")
        result = coord.mkdir("t", "/a")
        note = next(listener.notifies(timeout=10.0, stop_after=1))
    assert note.payload == str(row[0])  # the partition hash of the namespace written
    events, _ = read_all(coord)
    assert result.seq in positions(events)


def test_read_events_without_contents(coord: Coordinator, ns: str) -> None:
    """``contents=False`` (the indexer's read) gives the same events with every file's
    content as null, and nothing else changed: they still decode as their types."""
    coord.mkdir(ns, "/d")
    coord.create_file(ns, "/d/f", "the body", {"k": 1})
    coord.write_file(ns, "/d/f", "a new body")
    coord.rename(ns, "/d/f", "g")
    coord.import_nodes(ns, ['{"path": "/i/x", "kind": "file", "content": "imported"}'])
    full, cursor = coord.read_events(after=0)
    light, light_cursor = coord.read_events(after=0, contents=False)
    assert light_cursor == cursor
    assert [(e.position, e.type, e.node_id) for e in light] == [
        (e.position, e.type, e.node_id) for e in full
    ]
    with_content = 0
    for f, e in zip(full, light, strict=True):
        if "content" in f.payload and f.payload["content"] is not None:
            with_content += 1
            assert e.payload == {**f.payload, "content": None}
            change = e.change
            assert isinstance(change, Created | Written) and change.content is None
        else:
            assert e.payload == f.payload
        assert type(e.change) is type(f.change)
    assert with_content == 3  # the create, the write, the imported file
