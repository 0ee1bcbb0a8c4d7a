"""An import's server memory is bounded whatever its size, and its slices stay one import.

PostgreSQL queues each inserted row's foreign-key checks (to the namespace, to the parent)
until the end of the statement that inserted it: one ``INSERT`` of every imported node
queued tens of bytes a node in the backend (267 MB at 10,000,000 lines). The importer now
inserts in slices of a bounded number of rows. Measured here in the server itself: a
statement-level trigger on ``nodes`` records, per statement, the rows it inserted and the
size of the backend's ``AfterTriggerEvents`` memory context, which still holds that
statement's queue when the trigger fires (the queue is freed after its last event).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from test_import import check_log_explains_table, paths_of

from coordinator import Conflict, Coordinator
from coordinator.importer import Importer, ImportProgress, ImportResult, ProgressFn

# Per statement into ``nodes``: its rows and the queued trigger events' memory.
PROBE_SQL = [
    "CREATE TABLE insert_probe (rows bigint NOT NULL, queued_bytes bigint NOT NULL)",
    """CREATE FUNCTION probe_nodes_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO insert_probe
        SELECT (SELECT count(*) FROM new_rows),
               coalesce((SELECT sum(total_bytes) FROM pg_backend_memory_contexts
                         WHERE name = 'AfterTriggerEvents'), 0);
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER probe_nodes_insert AFTER INSERT ON nodes
       REFERENCING NEW TABLE AS new_rows
       FOR EACH STATEMENT EXECUTE FUNCTION probe_nodes_insert()""",
]


@pytest.fixture
def probe(coord: Coordinator) -> Iterator[Engine]:
    with coord.engine.begin() as conn:
        for statement in PROBE_SQL:
            conn.execute(text(statement))
    yield coord.engine


def probed(engine: Engine) -> list[tuple[int, int]]:
    """(rows, queued bytes) of each insert into ``nodes`` since the last call."""
    with engine.begin() as conn:
        rows = conn.execute(text("DELETE FROM insert_probe RETURNING rows, queued_bytes"))
        return [(int(r), int(b)) for r, b in rows]


def tree_lines(n: int) -> Iterator[str]:
    """``n`` lines of a three-level tree (directories of 100 files under 10 tops), children
    before their parents, so a slice taken in line order would miss parents."""
    dirs = -(-n // 101)
    made = 0
    for d in reversed(range(dirs)):
        for f in range(100):
            if made == n:
                return
            yield json.dumps({"path": f"/top{d % 10}/dir{d}/f{f}", "kind": "file",
                              "content": "x" * 40})
            made += 1
        if made == n:
            return
        yield json.dumps({"path": f"/top{d % 10}/dir{d}", "kind": "dir"})
        made += 1


def import_sliced(engine: Engine, ns: str, lines: Iterator[str], slice_rows: int,
                  progress: ProgressFn | None = None) -> ImportResult:
    """An import in its own transaction, ``slice_rows`` rows per statement."""
    with engine.begin() as conn:
        return Importer(conn, ns, slice_rows=slice_rows, progress=progress).run(lines)


def test_queued_trigger_memory_does_not_grow_with_the_import(
    coord: Coordinator, probe: Engine
) -> None:
    """Four times the lines, the same peak: each statement queues at most a slice's
    checks. (With one statement for every node, the queue grew with the import: about
    four times the bytes here.)"""
    slice_rows = 1000
    statements = []
    for ns, n in (("small", 40 * 101), ("large", 160 * 101)):
        coord.create_namespace(ns)
        probed(probe)  # not the root's row
        result = import_sliced(probe, ns, tree_lines(n), slice_rows)
        assert result.lines == n and result.created == n + 10  # the tops are implied
        stats = probed(probe)
        assert sum(rows for rows, _ in stats) == result.created
        statements.append(stats)
    small, large = (max(queued for _, queued in stats) for stats in statements)
    assert small > 0
    assert large <= 1.5 * small, (small, large)
    assert max(rows for stats in statements for rows, _ in stats) <= slice_rows
    check_log_explains_table(coord, "large")


def test_a_slice_is_read_through_the_rank_index(coord: Coordinator, ns: str) -> None:
    """Each slice reads its own rows, not the whole table: with a scan of the table per
    slice, an import of 10,000,000 lines would read it 200 times."""
    plans: list[str] = []

    def explain(p: ImportProgress) -> None:
        if p.phase == "events":  # the slices' table is there, with its index
            plans.extend(str(r[0]) for r in conn.execute(text(
                "EXPLAIN SELECT * FROM pk_import_new WHERE rank BETWEEN 1001 AND 2000")))

    with coord.engine.begin() as conn:
        Importer(conn, ns, slice_rows=1000, progress=explain).run(tree_lines(160 * 101))
    assert any("pk_import_new_rank_idx" in line for line in plans), plans


def test_a_sliced_import_is_the_same_import(coord: Coordinator, ns: str) -> None:
    """Slices of two rows: the same nodes, the same events (parents before children, one
    contiguous run of positions) as an import in one statement."""
    lines = [
        json.dumps({"path": "/a/b/c.txt", "kind": "file", "content": "hello"}),
        json.dumps({"path": "/z", "kind": "dir"}),
        json.dumps({"path": "/a", "kind": "dir", "metadata": {"owner": "me"}}),
        json.dumps({"path": "/a/b/d/e.txt", "kind": "file"}),
        json.dumps({"path": "/a/b/d/f.txt", "kind": "file"}),
    ]
    result = import_sliced(coord.engine, ns, iter(lines), 2)
    assert (result.lines, result.created, result.implied_dirs) == (5, 7, 2)
    assert result.first_seq is not None and result.last_seq == result.first_seq + 6
    assert paths_of(coord, ns) == {
        "/": ("dir", None), "/a": ("dir", None), "/a/b": ("dir", None),
        "/a/b/c.txt": ("file", "hello"), "/a/b/d": ("dir", None),
        "/a/b/d/e.txt": ("file", ""), "/a/b/d/f.txt": ("file", ""), "/z": ("dir", None),
    }
    with coord.engine.connect() as conn:
        positions = [int(p) for p in conn.execute(text(
            "SELECT position FROM events WHERE namespace = :ns AND type = 'created' "
            "ORDER BY position"), {"ns": ns}).scalars()]
    assert positions[-7:] == list(range(result.first_seq, result.first_seq + 7))
    check_log_explains_table(coord, ns)  # the fold needs parents' events first


def test_a_failure_in_a_later_slice_writes_nothing(coord: Coordinator, ns: str) -> None:
    """A create, on its own connection and committed after the import's checks, takes a
    path of the import's last slice: the earlier slices' rows are not kept."""
    coord.mkdir(ns, "/e")
    lines = [json.dumps({"path": f"/d{i}", "kind": "dir"}) for i in range(10)]
    lines.append(json.dumps({"path": "/e/x", "kind": "file"}))  # depth 2: the last slice
    before = paths_of(coord, ns)

    def create_it(p: ImportProgress) -> None:
        if p.phase == "insert":  # the checks are done, nothing inserted yet
            t = threading.Thread(target=coord.create_file, args=(ns, "/e/x", "theirs"))
            t.start()
            t.join(30)

    with pytest.raises(Conflict):
        import_sliced(coord.engine, ns, iter(lines), 3, progress=create_it)
    assert paths_of(coord, ns) == {**before, "/e/x": ("file", "theirs")}
    check_log_explains_table(coord, ns)
