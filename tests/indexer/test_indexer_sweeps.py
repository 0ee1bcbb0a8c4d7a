"""When a subtree pass sweeps stale paths, on real PostgreSQL and a real search server.

A sweep costs a refresh and a search, and on a busy server both hold up the node
lane's small requests; a load of renames in place needs neither. The old path of a
moved directory is swept only when, in the pass's snapshot, a node may have left the
moved subtree since the move: each case below is applied batch by batch, with the
snapshot taken at a chosen moment, and ends with the index equal to PostgreSQL. The
cases that need the sweep fail when the old path is never swept.
"""

from __future__ import annotations

from typing import Any

from indexer_support import expected_docs, index_docs, last_position, run_once
from sqlalchemy import text

from coordinator import Coordinator, Event
from indexer.applier import Applier, BatchResult
from indexer.live_nodes import may_have_left
from indexer.search_engine import SearchEngine


def applier(coord: Coordinator, es: SearchEngine, alias: str) -> Applier:
    return Applier(coord.engine, es, alias, lambda r: None)


def apply_read(app: Applier, events: list[Event]) -> BatchResult:
    """Apply a batch read earlier; its snapshot is taken now."""
    return app.apply(events, events[-1].position)


def external_refreshes(es: SearchEngine, alias: str) -> int:
    stats = es.index_stats(alias)["_all"]["primaries"]["refresh"]
    return int(stats["external_total"])


def assert_index_equals_pg(coord: Coordinator, es: SearchEngine, alias: str, ns: str) -> None:
    want = expected_docs(coord, ns)
    got = index_docs(es, alias, ns)
    stripped = {k: {f: v for f, v in d.items() if f != "seq"} for k, d in got.items()}
    stale = {k: d["path"] for k, d in stripped.items() if k not in want}
    assert not stale, f"stale documents left: {stale}"
    assert stripped == want


def test_renames_in_place_sweep_nothing_and_refresh_nothing(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    coord.create_namespace("s")
    for path in ("/a", "/a/d", "/a/d/e"):
        coord.mkdir("s", path)
    coord.create_file("s", "/a/d/e/g", "g")
    coord.create_file("s", "/a/f", "f")
    run_once(database_url, es_url, alias, partitions=1)
    # No scheduled refreshes from here on, so every one counted is asked for. One may
    # already be running: turn them off well before the count, and let an explicit
    # refresh (which waits for a running one) settle it.
    es.put_settings(alias, {"index": {"refresh_interval": "-1"}})
    before = last_position(coord)
    coord.rename("s", "/a/d", "d2")
    coord.rename("s", "/a/d2/e", "e2")
    coord.rename("s", "/a/d2/e2/g", "g2")
    coord.move("s", "/a/f", "/a/d2/f")  # a file moved to another directory
    events, _ = coord.read_events(after=before)
    es.refresh(alias)
    refreshes = external_refreshes(es, alias)
    result = apply_read(applier(coord, es, alias), events)
    assert not result.swept
    assert external_refreshes(es, alias) == refreshes
    assert_index_equals_pg(coord, es, alias, "s")


def test_a_directory_deleted_inside_a_moved_subtree_before_the_pass_is_swept(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    """/a/d/f/h: d renamed, then f deleted before the rename's pass runs. The pass finds
    no f and no h to rewrite; the delete's sweep looks under f's path at the time
    (/a/d2/f); only the old path's sweep finds h's document (/a/d/f/h)."""
    coord.create_namespace("s")
    for path in ("/a", "/a/d", "/a/d/f"):
        coord.mkdir("s", path)
    coord.create_file("s", "/a/d/f/h", "h")
    run_once(database_url, es_url, alias, partitions=1)
    before = last_position(coord)
    coord.rename("s", "/a/d", "d2")
    renamed, cursor = coord.read_events(after=before)
    coord.delete("s", "/a/d2/f", recursive=True)
    app = applier(coord, es, alias)
    assert apply_read(app, renamed).swept
    deleted, _ = coord.read_events(after=cursor)
    apply_read(app, deleted)
    assert_index_equals_pg(coord, es, alias, "s")


def test_a_directory_moved_out_then_deleted_in_a_later_pass_is_swept(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    """/a/d/e/g: d renamed, e moved out to /x before the rename's pass runs, e deleted
    after it. Without the old path's sweep in the first pass g's document keeps
    /a/d/e/g: the second pass's sweeps look under /a/d2/e (e's old path) and /x/e (its
    path when deleted)."""
    coord.create_namespace("s")
    for path in ("/a", "/a/d", "/a/d/e", "/x"):
        coord.mkdir("s", path)
    coord.create_file("s", "/a/d/e/g", "g")
    run_once(database_url, es_url, alias, partitions=1)
    before = last_position(coord)
    coord.rename("s", "/a/d", "d2")
    renamed, cursor = coord.read_events(after=before)
    coord.move("s", "/a/d2/e", "/x/e")
    app = applier(coord, es, alias)
    assert apply_read(app, renamed).swept
    coord.delete("s", "/x/e", recursive=True)
    rest, _ = coord.read_events(after=cursor)
    apply_read(app, rest)
    assert_index_equals_pg(coord, es, alias, "s")


def test_which_events_may_take_a_node_out_of_a_subtree(coord: Coordinator) -> None:
    """``may_have_left`` on the events the coordinator writes, one kind at a time."""
    coord.create_namespace("k")
    for path in ("/a", "/a/b", "/a/b/c", "/x"):
        coord.mkdir("k", path)
    coord.create_file("k", "/a/b/f", "f")

    def after(step: Any) -> bool:
        start = last_position(coord)
        step()
        with coord.engine.connect() as conn:
            return may_have_left(conn, "k", start)

    assert not after(lambda: coord.create_file("k", "/a/b/g", "g"))
    assert not after(lambda: coord.write_file("k", "/a/b/g", "g2"))
    assert not after(lambda: coord.set_metadata("k", "/a/b/g", {"m": 1}))
    assert not after(lambda: coord.rename("k", "/a/b/g", "g3"))
    assert not after(lambda: coord.move("k", "/a/b/g3", "/x/g3"))  # a file
    assert not after(lambda: coord.delete("k", "/x/g3"))  # a file
    assert not after(lambda: coord.rename("k", "/a/b/c", "c2"))  # a directory in place
    assert after(lambda: coord.move("k", "/a/b/c2", "/x/c2"))  # ... to another parent
    assert after(lambda: coord.delete("k", "/x/c2"))  # a directory, even empty
    with coord.engine.begin() as conn:  # an event of a type this code does not know
        conn.execute(text(
            "INSERT INTO events (namespace, position, node_id, type, payload) "
            "SELECT 'k', max(position) + 1, NULL, 'touched', '{}' FROM events"
        ))
    with coord.engine.connect() as conn:
        assert may_have_left(conn, "k", last_position(coord) - 1)
    assert after(lambda: coord.drop_namespace("k", force=True))
