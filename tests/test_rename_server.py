"""A rename runs whole in the server (``pathkeeper_rename``): the errors it raises reach the
caller as the same typed errors and messages as every other operation's, nothing is
written when it refuses, and the event it leads to is the one the Python rules wrote."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from sqlalchemy import text
from tree_checks import (
    BESIDE_NODES,
    buffers_of,
    check_claim_after_call,
    db_state,
    event_rows,
    freeze_statistics,
    nodes_reltuples,
    plans_of,
)

from coordinator import (
    AlreadyExists,
    Conflict,
    Coordinator,
    CoordinatorError,
    InvalidMove,
    NotADirectory,
    NotFound,
    Rename,
)
from coordinator.db import libpq_url
from coordinator.single_statement import function_logged_sql
from pathkeeper.local.bulk_tree import bulk_subtree


def test_refusals_are_typed_with_their_messages(coord: Coordinator, ns: str) -> None:
    d = coord.mkdir(ns, "/d").node
    f = coord.create_file(ns, "/d/f").node
    coord.mkdir(ns, "/d/e")
    root = coord.stat(ns, "/").id
    missing = "00000000-0000-0000-0000-000000000000"
    before = db_state(coord, ns)
    cases: list[tuple[object, str, int | None, type[CoordinatorError], str]] = [
        ("/d/x", "y", None, NotFound, "/d/x does not exist"),
        ("/x/y/z", "y", None, NotFound, "/x does not exist"),
        ("/d/f/z", "y", None, NotADirectory, "/d/f is a file"),
        (missing, "y", None, NotFound, f"no node with id {missing}"),
        ("/", "x", None, InvalidMove, "cannot rename the root"),
        (root, "x", None, InvalidMove, "cannot rename the root"),
        ("/d/f", "e", None, AlreadyExists, "/d/e already exists"),
        (f.id, "e", None, AlreadyExists, "/d/e already exists"),
        ("/d/f", "g", 7, Conflict, "version is 1, expected 7"),
        (d.id, "g", 3, Conflict, "version is 1, expected 3"),
    ]
    for ref, name, version, error, message in cases:
        with pytest.raises(error) as caught:
            coord.rename(ns, ref, name, if_version=version)
        assert type(caught.value) is error and str(caught.value) == message, (ref, name)
    with pytest.raises(NotFound) as no_ns:
        coord.rename("nope", "/d", "e")
    assert str(no_ns.value) == "no namespace 'nope'"
    assert db_state(coord, ns) == before


def test_event_and_result_by_path_and_by_id(coord: Coordinator, ns: str) -> None:
    d = coord.mkdir(ns, "/d").node
    f = coord.create_file(ns, "/d/f", "body", {"k": 1}).node
    by_path = coord.rename(ns, "/d/f", "g")
    assert (by_path.node.path, by_path.node.name, by_path.node.version) == ("/d/g", "g", 2)
    # The answer leaves the content out (its size would be the rename's cost), not the metadata.
    assert (by_path.node.content, by_path.node.metadata) == (None, {"k": 1})
    assert coord.get(ns, f.id).content == "body"
    assert by_path.node.parent_id == d.id and by_path.seq is not None
    by_id = coord.rename(ns, d.id, "e")
    assert (by_id.node.path, by_id.node.version, by_id.node.kind) == ("/e", 2, "dir")
    events = event_rows(coord)[-2:]
    assert [(e[0], e[2], str(e[3])) for e in events] == [
        (by_path.seq, "moved", f.id), (by_id.seq, "moved", d.id)
    ]
    assert events[0][4] == {
        "id": f.id, "kind": "file", "old_parent_id": d.id, "old_name": "f",
        "old_path": "/d/f", "parent_id": d.id, "name": "g", "path": "/d/g", "version": 2,
        "v": 1,
    }
    assert events[1][4]["old_path"] == "/d" and events[1][4]["path"] == "/e"
    # The same name: nothing changes, no event, the node as it is.
    logged = len(event_rows(coord))
    same = coord.rename(ns, "/e/g", "g")
    assert same.seq is None and same.node.version == 2 and same.node.path == "/e/g"
    assert len(event_rows(coord)) == logged


def test_by_id_the_same_results_and_events_as_by_path_below_the_top(
    coord: Coordinator, ns: str
) -> None:
    """By id the event's paths come from the node's ancestors, by path they are the
    caller's: three levels down, and after an ancestor's rename, both forms agree."""
    coord.mkdir(ns, "/a/b/c", parents=True)
    f = coord.create_file(ns, "/a/b/c/f").node
    g = coord.create_file(ns, "/a/b/c/g").node
    coord.rename(ns, "/a", "z")
    by_path = coord.rename(ns, "/z/b/c/f", "f2")
    by_id = coord.rename(ns, g.id, "g2")
    assert (by_path.node.path, by_id.node.path) == ("/z/b/c/f2", "/z/b/c/g2")
    assert by_path.node.parent_id == by_id.node.parent_id
    events = event_rows(coord)[-2:]
    assert [str(e[3]) for e in events] == [f.id, g.id]
    path_payload, id_payload = events[0][4], events[1][4]
    assert (id_payload["old_path"], id_payload["path"]) == ("/z/b/c/g", "/z/b/c/g2")
    same_keys = ("kind", "old_parent_id", "parent_id", "version", "v")
    assert [path_payload[k] for k in same_keys] == [id_payload[k] for k in same_keys]


def test_by_id_reads_no_more_than_by_path_before_statistics(coord: Coordinator) -> None:
    """Before nodes has statistics (a new database, before autovacuum's first analyze)
    a rename by id must still read its row and its ancestors through (namespace, id),
    not its whole namespace: it read 0.6-1.0 ms of rows in a namespace of 400 nodes
    where the same rename by path read a few index pages."""
    url = libpq_url(coord.engine.url.render_as_string(hide_password=False))
    coord.create_namespace("t")
    coord.mkdir("t", "/a/b", parents=True)
    f = coord.create_file("t", "/a/b/f").node
    g = coord.create_file("t", "/a/b/g").node
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE nodes SET (autovacuum_enabled = false)")
        conn.execute(
            "INSERT INTO nodes (namespace, id, parent_id, name, kind, content) "
            "SELECT 't', gen_random_uuid(), %s, 'x' || n, 'file', '' "
            "FROM generate_series(1, 400) n", (g.parent_id,))
        stats = conn.execute(
            "SELECT reltuples FROM pg_class WHERE relname = 'nodes'").fetchone()
        assert stats is not None and stats[0] < 0  # never analyzed
        call = "SELECT * FROM pathkeeper_rename('t', %s, %s, %s, %s, NULL)"
        by_path = buffers_of(conn, call, ("/a/b/f", ["a", "b", "f"], None, "f2"))
        by_id = buffers_of(conn, call, (g.id, None, g.id, "g2"))
    assert by_id <= by_path, (by_id, by_path)
    assert coord.stat("t", g.id).path == "/a/b/g2"
    assert coord.stat("t", f.id).path == "/a/b/f2"


def test_writes_by_id_update_through_the_id_with_stale_statistics(coord: Coordinator) -> None:
    """Statistics from when the namespace was empty beside a large one (a burst of
    creates, before autovacuum's next analyze): the planner guessed one row for the
    namespace and
    updated the row through (namespace, parent_id, name), reading the whole namespace (a
    rename by id took 2.9-4.0 ms in a namespace of 20,000 nodes, 0.8-1.1 ms analyzed).
    A rename and a write by id then touch about as many buffers as after an analyze."""
    url = libpq_url(coord.engine.url.render_as_string(hide_password=False))
    coord.create_namespace("t")
    freeze_statistics(coord, beside=True)  # the namespace's root beside 1,000 nodes
    assert 0 <= nodes_reltuples(coord) < BESIDE_NODES + 10
    bulk_subtree(coord, "t", "/", "t", dirs=20, files_per_dir=100)  # a burst of creates
    ids = [coord.stat("t", f"/t/d3/f{i}").id for i in range(8)]
    rename = "SELECT * FROM pathkeeper_rename('t', %s, NULL, %s, %s, NULL)"
    write = "SELECT * FROM pathkeeper_write('t', %s, NULL, %s, 'new', NULL, NULL)"
    with psycopg.connect(url, autocommit=True) as conn:
        # A session's first call reads the catalogs to compile the functions.
        conn.execute(rename, (ids[4], ids[4], "r4"))
        conn.execute(write, (ids[5], ids[5]))
        stale = (buffers_of(conn, rename, (ids[0], ids[0], "r0")),
                 buffers_of(conn, write, (ids[1], ids[1])))
        conn.execute("ANALYZE nodes")  # and plan again, reading the new statistics
        conn.execute(rename, (ids[6], ids[6], "r6"))
        conn.execute(write, (ids[7], ids[7]))
        analyzed = (buffers_of(conn, rename, (ids[2], ids[2], "r2")),
                    buffers_of(conn, write, (ids[3], ids[3])))
    assert all(s <= a + 10 for s, a in zip(stale, analyzed, strict=True)), (stale, analyzed)
    assert coord.stat("t", ids[0]).path == "/t/d3/r0"
    assert coord.stat("t", ids[1]).content == "new"


def test_a_refused_rename_fails_its_group(coord: Coordinator, ns: str) -> None:
    coord.mkdir(ns, "/a")
    coord.mkdir(ns, "/b")
    before = db_state(coord, ns)
    with pytest.raises(AlreadyExists) as caught:
        coord.apply(ns, [Rename("/a", "c"), Rename("/c", "b")])
    assert caught.value.index == 1
    assert db_state(coord, ns) == before


def test_a_name_taken_while_the_rename_runs(coord: Coordinator, ns: str) -> None:
    """The function's own check passed, then a create of the same name commits first:
    the unique constraint refuses the update, and the caller still gets the path."""
    coord.mkdir(ns, "/d")
    coord.create_file(ns, "/d/f")
    with coord.engine.connect() as other:
        # The sibling exists but is not committed when the rename checks for it: the
        # rename's UPDATE then waits on the unique index, and fails when it commits.
        other.execute(text(
            "INSERT INTO nodes (namespace, id, parent_id, name, kind) "
            "SELECT CAST(:ns AS text), gen_random_uuid(), id, 'g', 'dir' FROM nodes "
            "WHERE namespace = :ns AND name = 'd'"
        ), {"ns": ns})
        errors: list[BaseException] = []

        def rename() -> None:
            try:
                coord.rename(ns, "/d/f", "g")
            except BaseException as exc:  # handed to the test thread
                errors.append(exc)

        worker = threading.Thread(target=rename)
        worker.start()
        # Commit only once the rename waits on that row (after its own check passed):
        # else its check would refuse it with the same message, and prove nothing here.
        url = libpq_url(coord.engine.url.render_as_string(hide_password=False))
        with psycopg.connect(url, autocommit=True) as watcher:
            deadline = time.monotonic() + 30
            while not (watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE '%pathkeeper_rename%'"
            ).fetchone() or [0])[0]:
                assert worker.is_alive() and time.monotonic() < deadline, (
                    "the rename did not wait for the uncommitted sibling", errors)
                time.sleep(0.02)
        other.commit()
        worker.join(10)
    assert len(errors) == 1 and type(errors[0]) is AlreadyExists
    assert str(errors[0]) == "/d/g already exists"
    assert coord.stat(ns, "/d/f").version == 1


def test_lone_rename_claims_its_block_after_the_function(coord: Coordinator) -> None:
    """In the one-statement rename the claim (transaction id, position lock, then
    ``nextval``) must run after ``pathkeeper_rename`` took its locks and wrote: checked
    on the plan, as for the block statement (coordinator/event_appender.py), and only for a
    rename that changed the name."""
    params = [("ns", "text", "'t'"), ("ref", "text", "'/a'"), ("parts", "text[]", "'{a}'"),
              ("id", "uuid", "NULL"), ("name", "text", "'b'"), ("if_version", "bigint", "NULL")]
    check_claim_after_call(coord, function_logged_sql(Rename.function), params, "pathkeeper_rename",
                           "r_1.changed")


def test_lone_renames_reuse_one_plan(database_url: str) -> None:
    """The lone rename's statement is planned once per connection, not per rename: the
    function is declared to return its one row, so the generic plan does not look dearer
    than a plan for the values (a re-plan was a fifth of a rename's server CPU)."""
    with Coordinator.connect(database_url, pool_size=1, max_overflow=0) as coord:
        coord.create_namespace("t")
        coord.create_file("t", "/f0")
        for i in range(1, 31):
            coord.rename("t", f"/f{i - 1}", f"f{i}")
        # psycopg prepares it from its 6th run; PostgreSQL plans the first 5 runs of a
        # prepared statement for their values, then keeps the generic plan if no dearer.
        assert plans_of(coord, "pathkeeper_rename") == (20, 5)


def test_lone_renames_by_id_reuse_one_plan(database_url: str) -> None:
    """By id, as by path: the lone rename's statement is planned once per connection."""
    with Coordinator.connect(database_url, pool_size=1, max_overflow=0) as coord:
        coord.create_namespace("t")
        node = coord.create_file("t", "/f0").node
        for i in range(1, 31):
            coord.rename("t", node.id, f"f{i}")
        assert plans_of(coord, "pathkeeper_rename") == (20, 5)


def test_lone_renames_and_a_live_reader(coord: Coordinator) -> None:
    """Clients renaming through the one-statement path while a reader follows the log:
    the reader sees every rename's event once, in position order, each at the position
    the rename returned, and nothing else."""
    ns = "t"
    coord.create_namespace(ns)
    clients, per_client = 4, 40
    for k in range(clients):
        coord.create_file(ns, f"/f{k}-0")
    stop = threading.Event()
    seen: list[int] = []
    returned: list[int] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        for i in range(per_client):
            seq = coord.rename(ns, f"/f{k}-{i}", f"f{k}-{i + 1}").seq
            assert seq is not None
            with lock:
                returned.append(seq)

    def reader() -> None:
        cursor: int | None = None
        while True:
            done = stop.is_set()
            events, cursor = coord.read_events(after=cursor, limit=5, namespaces=[ns], wait=0.5)
            seen.extend(e.position for e in events if e.type == "moved")
            if done and not events:
                return

    reading = threading.Thread(target=reader, daemon=True)
    reading.start()
    workers = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    stop.set()
    reading.join(60)
    assert not reading.is_alive()
    assert seen == sorted(seen) and sorted(returned) == seen
    assert len(seen) == clients * per_client
    assert sorted(n.name for n in coord.listdir(ns, "/")) == [
        f"f{k}-{per_client}" for k in range(clients)
    ]


def test_lone_rename_after_the_server_dropped_its_pooled_connection(
    coord: Coordinator, ns: str
) -> None:
    """Its COMMIT goes out with the statement, so a failed send cannot be re-run; a
    pooled connection the server already closed is noticed before sending instead."""
    coord.create_file(ns, "/a")
    coord.rename(ns, "/a", "b")  # a pooled connection now exists
    others = (
        "FROM pg_stat_activity WHERE application_name = 'pathkeeper' "
        "AND pid <> pg_backend_pid() AND datname = current_database()"
    )
    # Not through the pool: the connection to drop is the pool's.
    url = libpq_url(coord.engine.url.render_as_string(hide_password=False))
    with psycopg.connect(url, autocommit=True) as admin:
        assert admin.execute(f"SELECT count(pg_terminate_backend(pid)) {others}").fetchone()
        deadline = time.monotonic() + 10
        while (admin.execute(f"SELECT count(*) {others}").fetchone() or [0])[0]:
            assert time.monotonic() < deadline, "the terminated backends did not exit"
            time.sleep(0.05)
    for old, new in (("b", "c"), ("c", "d"), ("d", "e")):
        assert coord.rename(ns, f"/{old}", new).seq is not None
    assert coord.stat(ns, "/e").version == 5
