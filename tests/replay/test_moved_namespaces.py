"""What a server's log consumers do with a namespace moved to it (docs/sharding.md,
sections 2-3): while it is ``incoming`` (rows and events being copied in) nothing of it
is read, indexed, reindexed or verified; after its flip (``log_from``, and the move's
snapshot of it alone) its copied events are not applied again, its fold starts from its
own snapshot, a replay as of a position below ``log_from`` is refused, and the change
feed reads its copied events. The feed clamps the cursor of a namespace frozen here to
``frozen_at``. The copy is made the way a move makes it: rows written by a real
coordinator on another database, copied with their positions."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from sqlalchemy import text

from coordinator import Coordinator
from coordinator.event_reader import wait_for_bound
from coordinator.results import POSITION_BLOCK
from indexer import setfold
from indexer.errors import ReplayError
from indexer.replay import rebuild
from indexer.retention import compact, take_snapshot
from indexer.search_engine import SearchEngine
from indexer.verify import verify_index, verify_log
from pathkeeper.cli.main import main
from pathkeeper.http.feed import follow
from pathkeeper.local.postgres import LocalPostgres

from .conftest import RunningWorker, index_docs

_TABLES = {
    "namespaces": "SELECT * FROM namespaces WHERE name = %s",
    "nodes": "SELECT * FROM nodes WHERE namespace = %s",
    "events": "SELECT * FROM events WHERE namespace = %s",
}


_sources = itertools.count()


@pytest.fixture
def source(pg_cluster: LocalPostgres) -> Iterator[Coordinator]:
    """Another database (the server a namespace moves from), its sequence well ahead."""
    name = f"pk_source_{os.getpid()}_{next(_sources)}"
    url = pg_cluster.create_database(name, template="pk_template")
    with Coordinator.connect(url) as coord:
        with coord.engine.begin() as conn:
            conn.execute(text(f"SELECT setval('event_position_seq', {40 * POSITION_BLOCK})"))
        yield coord


def copy_in(source: Coordinator, target: Coordinator, ns: str) -> None:
    """Mark ``ns`` incoming on the target, then copy its rows there with their positions
    (what the move's subscription does), writing no event of the target's own."""
    with target.engine.begin() as conn:
        conn.execute(text("INSERT INTO namespace_placement (namespace, state) "
                          "VALUES (:ns, 'incoming')"), {"ns": ns})
    src_url = source.engine.url.render_as_string(hide_password=False).replace(
        "postgresql+psycopg", "postgresql")
    dst_url = target.engine.url.render_as_string(hide_password=False).replace(
        "postgresql+psycopg", "postgresql")
    with psycopg.connect(src_url) as src, psycopg.connect(dst_url) as dst:
        dst.execute("SET session_replication_role = replica")  # as the apply worker
        for table, sql in _TABLES.items():
            cur = src.execute(sql.encode(), (ns,))
            cols = [d.name for d in cur.description or ()]
            rows = cur.fetchall()
            if rows:
                marks = ", ".join(["%s"] * len(cols))
                with dst.cursor() as c:
                    c.executemany(
                        f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})".encode(),
                        [tuple(psycopg.types.json.Jsonb(v) if isinstance(v, dict) else v
                               for v in r) for r in rows])


def flip(source: Coordinator, target: Coordinator, ns: str,
         between: Callable[[], object] = lambda: None) -> int:
    """Steps 3, 5 and 6(a) of a move: freeze on the source, carry the sequence, and on the
    target ``active`` with ``log_from`` and the namespace's own snapshot (``between``
    runs after the sequence step). Returns F."""
    with source.engine.begin() as conn:
        l_s = int(conn.execute(text("SELECT pathkeeper_freeze_namespace(:ns)"),
                               {"ns": ns}).scalar_one())
    f = l_s + POSITION_BLOCK - 1
    with target.engine.begin() as conn:
        conn.execute(text("LOCK pathkeeper_locks.position_lock IN EXCLUSIVE MODE"))
        conn.execute(text("SELECT setval('event_position_seq', "
                          "greatest(last_value, CAST(:l AS bigint))) FROM event_position_seq"),
                     {"l": l_s})
    between()
    with target.engine.begin() as conn:
        conn.execute(text("UPDATE namespace_placement SET state = 'active', log_from = :f "
                          "WHERE namespace = :ns"), {"f": f, "ns": ns})
        sid = conn.execute(text(
            "INSERT INTO log_snapshots (position, namespaces, nodes, anomalies, namespace) "
            "SELECT :f, 1, count(*), 0, CAST(:ns AS text) FROM nodes "
            "WHERE namespace = CAST(:ns AS text) RETURNING id"
        ), {"f": f, "ns": ns}).scalar_one()
        conn.execute(text(
            "INSERT INTO log_snapshot_nodes (snapshot_id, namespace, id, parent_id, name, "
            "kind, content, metadata, version) SELECT :sid, namespace, id, parent_id, name, "
            "kind, content, metadata, version FROM nodes WHERE namespace = :ns"
        ), {"sid": sid, "ns": ns})
    return f


def fill(coord: Coordinator, ns: str) -> None:
    coord.create_namespace(ns)
    coord.mkdir(ns, "/a")
    coord.create_file(ns, "/a/f", "one", {"k": 1})
    coord.write_file(ns, "/a/f", "two")
    coord.rename(ns, "/a", "b")


def namespaces_of(events: list[Any]) -> set[str]:
    return {e.namespace for e in events}


def folded(coord: Coordinator, until: int, namespaces: list[str] | None = None
           ) -> dict[str, dict[str, tuple[Any, ...]]]:
    with setfold.fold(coord.engine, until=until, namespaces=namespaces) as f:
        assert f.anomalies.count == 0, f.anomalies.first
        return {ns: {n.id: (n.path, n.kind, n.content, n.metadata, n.version)
                     for n in f.trees[ns].nodes()} for ns in f.namespaces()}


def table(coord: Coordinator, ns: str) -> dict[str, tuple[Any, ...]]:
    return {n.id: (n.path, n.kind, n.content, n.metadata, n.version) for n in coord.walk(ns)}


def test_an_incoming_namespace_is_invisible_to_the_log_and_its_readers(
    coord: Coordinator, source: Coordinator
) -> None:
    fill(coord, "t")
    fill(source, "m")
    copy_in(source, coord, "m")
    events, _ = coord.read_events(limit=10_000)
    assert namespaces_of(events) == {"t"}
    assert coord.read_events(namespaces=["m"], copied=True)[0] == []
    bound = wait_for_bound(coord.engine)
    assert set(folded(coord, bound)) == {"t"}
    report = verify_log(coord)
    assert report.ok and report.anomaly_count == 0, (report.drift, report.anomalies)


def test_a_moved_in_namespace_folds_from_its_own_snapshot_and_skips_its_copies(
    coord: Coordinator, source: Coordinator
) -> None:
    fill(coord, "t")
    fill(source, "m")
    copy_in(source, coord, "m")
    early = wait_for_bound(coord.engine)
    f = flip(source, coord, "m")
    assert early < f
    coord.mkdir("m", "/b/after")       # the namespace's first write here
    coord.write_file("m", "/b/f", "three")
    coord.mkdir("t", "/later")
    events, _ = coord.read_events(limit=10_000)
    mine = [e for e in events if e.namespace == "m"]
    assert [e.type for e in mine] == ["created", "written"] and mine[0].position > f
    # The feed reads the copied history too, in order.
    feed, _ = coord.read_events(namespaces=["m"], copied=True, limit=10_000)
    assert [e.position for e in feed] == sorted(e.position for e in feed)
    assert len(feed) == 5 + 2 and feed[-2:] == mine
    # The fold: m from its own snapshot at F plus its events after it, t from the start.
    bound = wait_for_bound(coord.engine)
    state = folded(coord, bound)
    assert state == {"t": table(coord, "t"), "m": table(coord, "m")}
    assert folded(coord, bound, ["m"]) == {"m": table(coord, "m")}
    report = verify_log(coord)
    assert report.ok and report.anomaly_count == 0, (report.drift, report.anomalies)
    # A snapshot of everything holds m (folded from its own); folds from it agree.
    snap = take_snapshot(coord.engine)
    assert snap.namespaces == 2
    coord.rename("m", "/b/after", "later")
    assert folded(coord, wait_for_bound(coord.engine)) == {
        "t": table(coord, "t"), "m": table(coord, "m")}
    # As of a position below F, m's state is not in this log: refused, naming it; t's is.
    with pytest.raises(setfold.LogCompacted, match="namespace m was moved to this server"):
        folded(coord, early)
    assert set(folded(coord, early, ["t"])) == {"t"}


def test_replay_until_below_a_namespaces_move_is_refused(
    coord: Coordinator, source: Coordinator, es: SearchEngine, alias: str,
    database_url: str, es_url: str,
) -> None:
    fill(coord, "t")
    fill(source, "m")
    copy_in(source, coord, "m")
    early = wait_for_bound(coord.engine)
    flip(source, coord, "m")
    with pytest.raises(ReplayError, match="namespace m was moved to this server"):
        rebuild(coord, es, source="events", alias=alias, until=early)
    res = CliRunner().invoke(main, ["replay", "--database-url", database_url, "--es-url",
                                    es_url, "--alias", alias, "--until", str(early), "-q"])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0].startswith("error: namespace m was moved to this server"), lines


def test_the_feed_stops_a_frozen_namespaces_cursor_at_frozen_at(coord: Coordinator) -> None:
    fill(coord, "f")
    fill(coord, "o")
    with coord.engine.begin() as conn:
        l_s = int(conn.execute(text("SELECT pathkeeper_freeze_namespace('f')")).scalar_one())
    frozen_at = l_s + POSITION_BLOCK - 1
    for i in range(3):
        coord.mkdir("o", f"/x{i}")  # the log's end moves on past frozen_at
    events, cursor = coord.read_events(namespaces=["f"], copied=True, limit=10_000)
    assert len(events) == 5 and cursor == frozen_at
    assert coord.read_events(cursor, namespaces=["f"], copied=True) == ([], frozen_at)
    assert coord.read_events("now", namespaces=["f"], copied=True) == ([], frozen_at)
    assert follow(coord, None, "f", frozen_at, 100, 0.1).cursor == str(frozen_at)
    # Unclamped (the worker's read), and for a namespace that is not frozen: the log's end.
    assert coord.read_events(namespaces=["f"])[1] > frozen_at
    assert coord.read_events(namespaces=["o"], copied=True)[1] > frozen_at
    with coord.engine.begin() as conn:
        conn.execute(text("UPDATE namespace_placement SET state = 'gone' WHERE namespace = 'f'"))
    assert coord.read_events(namespaces=["f"], copied=True)[1] == frozen_at


def test_an_incoming_namespace_is_never_indexed_reindexed_or_verified(
    coord: Coordinator, source: Coordinator, es: SearchEngine, alias: str,
    live_worker: RunningWorker,
) -> None:
    fill(coord, "t")
    fill(source, "m")
    copy_in(source, coord, "m")
    coord.mkdir("t", "/more")
    live_worker.caught_up(coord)
    docs = index_docs(es, alias)
    assert docs and {d["namespace"] for d in docs.values()} == {"t"}
    report = verify_index(coord, es, alias=alias)
    assert report.ok, report.drift
    result = rebuild(coord, es, source="snapshot", alias=alias)
    assert result.swapped
    assert index_docs(es, alias) == docs
    result = rebuild(coord, es, source="events", alias=alias)
    assert index_docs(es, alias) == docs
    assert verify_index(coord, es, alias=alias).ok
    assert verify_log(coord).ok


def test_compaction_keeps_a_moved_in_namespaces_base(
    coord: Coordinator, source: Coordinator
) -> None:
    """A snapshot of every namespace taken while m was still incoming (after the move
    carried the sequence and the target wrote on, so above m's log_from) does not hold
    m: compacting up to it would delete m's own snapshot, its only base. It is not taken
    as the cut; a later snapshot, which holds m (folded from its own), is."""
    fill(coord, "t")
    fill(source, "m")
    copy_in(source, coord, "m")

    def meanwhile() -> None:  # the target's own writers go on: the snapshot is above F
        coord.mkdir("t", "/meanwhile")
        take_snapshot(coord.engine)

    flip(source, coord, "m", between=meanwhile)
    coord.mkdir("m", "/b/after")
    assert folded(coord, wait_for_bound(coord.engine)) == {
        "t": table(coord, "t"), "m": table(coord, "m")}
    nothing = compact(coord.engine, timedelta(0), force=True)
    assert nothing.snapshot_id is None and nothing.events_deleted == 0, nothing
    holds_m = take_snapshot(coord.engine)
    done = compact(coord.engine, timedelta(0), force=True)
    assert done.snapshot_id == holds_m.id and done.events_deleted > 0
    coord.rename("m", "/b/after", "later")
    assert folded(coord, wait_for_bound(coord.engine)) == {
        "t": table(coord, "t"), "m": table(coord, "m")}
    assert verify_log(coord).ok
