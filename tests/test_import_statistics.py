"""Statements right after a namespace grew are planned for the namespace as it is, not
as it was: an import that adds what autovacuum would analyze for is followed by
``ANALYZE nodes`` at once, and statistics that saw each namespace once do not take the
namespace for a single row (a directory move, the foreign-key check of each new node)."""

from __future__ import annotations

import time

import psycopg
import pytest
from sqlalchemy import text
from tree_checks import buffers_of, freeze_statistics, nodes_reltuples

from coordinator import Coordinator
from coordinator.db import libpq_url
from coordinator.importer import Importer, analyze_if_grown
from pathkeeper.local.bulk_tree import bulk_subtree


def _lines(top: str, n: int) -> list[str]:
    return [f'{{"path": "{top}/d{i // 100}/f{i}", "kind": "file"}}' for i in range(n)]


def test_a_large_import_is_analyzed_a_small_one_is_not(coord: Coordinator, ns: str) -> None:
    freeze_statistics(coord)  # the namespace's root only
    assert nodes_reltuples(coord) < 10
    created = coord.import_nodes(ns, _lines("/t", 2_000)).created
    assert created == 2_021  # the files, 20 directories and /t
    assert nodes_reltuples(coord) == created + 1  # the root: every row counted
    coord.import_nodes(ns, _lines("/u", 10))  # 12 rows: below 50 + 10 % of 2,022
    assert nodes_reltuples(coord) == created + 1


# An expression index whose function sleeps only inside an ANALYZE: the import's inserts
# pass at full speed, and the ANALYZE after it outlasts any statement timeout. A timeout of
# a millisecond instead raced the session's first statements (the driver's type lookup on
# connect) on a loaded machine.
_SLOW_ANALYZE = """
CREATE FUNCTION slow_in_analyze(name text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF current_query() LIKE 'ANALYZE%' THEN PERFORM pg_sleep(600); END IF;
    RETURN name;
END $$;
CREATE INDEX nodes_slow_in_analyze ON nodes (slow_in_analyze(name));
"""


def test_nothing_after_the_commit_fails_the_import(coord: Coordinator, ns: str,
                                                  database_url: str,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """The import has committed when its ANALYZE runs: a table another session is
    analyzing (its lock held) is skipped, an ANALYZE past the session's statement timeout
    is given up; either way the import returns its result."""
    freeze_statistics(coord)  # the namespace's root only
    url = libpq_url(coord.engine.url.render_as_string(hide_password=False))
    with psycopg.connect(url) as holder:
        holder.execute("LOCK TABLE nodes IN SHARE UPDATE EXCLUSIVE MODE")  # as ANALYZE does
        assert coord.import_nodes(ns, _lines("/t", 2_000)).created == 2_021
        assert nodes_reltuples(coord) < 10  # skipped, not waited for
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_SLOW_ANALYZE.encode())
    known = nodes_reltuples(coord)  # an index build counts the table's rows too
    with Coordinator.connect(database_url, statement_timeout=2.0) as hurried:
        started = time.monotonic()
        # The import itself under a timeout of its own; the ANALYZE after it under the
        # session's two seconds.
        assert hurried.import_nodes(ns, _lines("/u", 20_000), timeout=600).created == 20_201
        assert time.monotonic() - started < 60  # cancelled at the timeout, not waited out
    assert nodes_reltuples(coord) == known
    assert "canceling statement due to statement timeout" in caplog.text
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP INDEX nodes_slow_in_analyze")
    with coord.engine.connect() as conn:  # and run alone, it does analyze
        assert analyze_if_grown(conn.execution_options(isolation_level="AUTOCOMMIT"), 22_222)
    assert nodes_reltuples(coord) == 2_021 + 20_201 + 1


@pytest.mark.parametrize("grown_by", ["import", "burst of creates"])
def test_a_directory_move_right_after_the_namespace_grew_reads_by_index(
        coord: Coordinator, ns: str, grown_by: str) -> None:
    """Statistics from before the namespace grew: a directory move right after an import
    of 20,000 nodes took 46-103 ms (1.7 ms analyzed): its walks, its lock of the
    ancestors and its foreign-key check read the whole namespace at each probe. It now
    touches about as many buffers right after as after an analyze: an import analyzes;
    after a burst of creates (195,211 buffers against 92 analyzed for 20,000 nodes) the
    namespace is no longer taken for a single row (migration 0018)."""
    url = libpq_url(coord.engine.url.render_as_string(hide_password=False))
    freeze_statistics(coord)  # the namespace's root only
    if grown_by == "import":
        coord.import_nodes(ns, _lines("/t", 2_000))
    else:
        bulk_subtree(coord, ns, "/", "t", dirs=20, files_per_dir=100)
    coord.mkdir(ns, "/u/v/w", parents=True)
    dirs = [coord.mkdir(ns, f"/t/d1/m{k}").node.id for k in range(4)]
    move = (f"SELECT * FROM pathkeeper_move('{ns}', %s, NULL, %s, ARRAY['u', 'v', 'w'], "
            "%s, NULL, 256)")
    with psycopg.connect(url, autocommit=True) as conn:
        # A session's first call reads the catalogs to compile the functions.
        conn.execute(move.encode(), (dirs[0], dirs[0], "m0"))
        grown = buffers_of(conn, move, (dirs[1], dirs[1], "m1"))
        conn.execute("ANALYZE nodes")  # and plan again, reading the new statistics
        conn.execute(move.encode(), (dirs[2], dirs[2], "m2"))
        analyzed = buffers_of(conn, move, (dirs[3], dirs[3], "m3"))
    assert grown <= analyzed + 10, (grown, analyzed)
    assert coord.stat(ns, dirs[1]).path == "/u/v/w/m1"


def _index_reads(url: str, rows: int) -> int:
    """Index entries read through (namespace, parent_id, name) so far, once the table's
    counters show ``rows`` inserted: counters reach the server when a session flushes
    them, at the latest when it ends."""
    deadline = time.monotonic() + 60
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            inserted, reads = conn.execute(
                "SELECT t.n_tup_ins, i.idx_tup_read FROM pg_stat_user_tables t"
                " JOIN pg_stat_user_indexes i USING (relid)"
                " WHERE t.relname = 'nodes'"
                " AND i.indexrelname = 'uq_nodes_namespace_parent_name'").fetchone() or (0, 0)
            if inserted >= rows or time.monotonic() > deadline:
                assert inserted >= rows, "the sessions' counters never reached the server"
                return int(reads)
            time.sleep(0.1)


def test_the_first_import_into_a_new_namespace_finds_parents_by_key(database_url: str
                                                                    ) -> None:
    """Statistics taken when each namespace held its root alone (a service creates its
    tenants, autovacuum analyzes past 50 new rows, then the tenants' trees are imported):
    each namespace is in the sample once, so the column looked unique. PostgreSQL's own
    foreign-key check of each new node (its parent, by namespace, id and kind) then read
    the whole namespace through the (namespace, parent_id, name) index: the reads grew
    with the square of the import (8,385,102 index entries for 5,000 nodes; 20,000 nodes
    took 64 s instead of 0.82 s, bench/README.md)."""
    url = libpq_url(database_url)
    with Coordinator.connect(database_url) as coord:
        for k in range(60):
            coord.create_namespace(f"tenant{k}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE nodes")
    before = _index_reads(url, 60)
    with Coordinator.connect(database_url) as coord:  # its sessions end, counters flushed
        assert coord.import_nodes("tenant1", _lines("/c", 5_000)).created == 5_051
    reads = _index_reads(url, 60 + 5_051) - before
    assert reads < 5_051, reads  # a probe per directory at most, not a namespace per node


def test_an_import_beside_a_large_namespace_checks_parents_by_key(database_url: str) -> None:
    """Statistics that saw the namespace small beside a large one take it for a row or
    two. PostgreSQL plans a session's first five runs of each foreign-key check for their
    parameters, and such a plan read the whole namespace through the (namespace,
    parent_id, name) index: five times the rows inserted so far, at the end of each
    slice of the import (its first five checks run there). The import has its checks
    planned generically, which probe (namespace, id, kind)."""
    url = libpq_url(database_url)
    with Coordinator.connect(database_url) as coord:
        coord.create_namespace("small")
        freeze_statistics(coord, beside=True)
    with psycopg.connect(url, autocommit=True) as conn:
        (rows,) = conn.execute("SELECT count(*) FROM nodes").fetchone() or (0,)
    before = _index_reads(url, rows)
    with Coordinator.connect(database_url) as coord:  # a new session: its first checks
        assert coord.import_nodes("small", _lines("/c", 5_000)).created == 5_051
    reads = _index_reads(url, rows + 5_051) - before
    assert reads < 5_051, reads  # a probe per directory at most, not a namespace per check


@pytest.mark.parametrize("mode", ["auto", "force_custom_plan"])
def test_the_import_gives_the_session_its_plan_mode_back(coord: Coordinator, ns: str,
                                                         mode: str) -> None:
    """Generic plans are forced for the slices only: the events that follow them in the
    same transaction, and whatever the caller runs in it after the import, are planned
    in the session's own mode."""
    with coord.engine.begin() as conn:
        conn.execute(text(f"SET LOCAL plan_cache_mode = {mode}"))
        Importer(conn, ns, slice_rows=100).run(_lines("/m", 1_000))
        assert conn.execute(text("SHOW plan_cache_mode")).scalar_one() == mode
