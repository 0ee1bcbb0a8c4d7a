"""The snapshot of a moved namespace alone that its new shard folds from (its history
there begins at the flip, docs/sharding.md section 3), written in two parts so that the
freeze pays only for what changed:

* ``write_draft`` (before the freeze, while the copy runs on): a snapshot of the copied
  rows as they are, at position 0. The namespace is ``incoming`` on the shard, so no
  reader of the log or of snapshots looks at it, and position 0 is never the newest
  snapshot of anything;
* ``finish`` (at the flip, the rows final): brings the draft to the rows' final state and
  sets its position: by the rows written since the draft began when the same mover wrote
  it (``_finish_from``), else by comparing every row. A draft that is gone (a compaction
  on the shard removed it) is written whole instead.

Measured figures: docs/sharding.md section 3, "As built".
"""

from __future__ import annotations

from .move_replication import Conn

_COLUMNS = "parent_id, name, kind, content, metadata, version"
#: Position of a draft (not a snapshot of any point of the log yet).
DRAFT_POSITION = 0


def _insert_rows(conn: Conn, snapshot_id: int, namespace: str, only_missing: bool) -> int:
    missing = (" AND NOT EXISTS (SELECT 1 FROM log_snapshot_nodes s WHERE s.snapshot_id = %s "
               "AND s.namespace = n.namespace AND s.id = n.id)") if only_missing else ""
    return conn.execute(
        (f"INSERT INTO log_snapshot_nodes (snapshot_id, namespace, id, {_COLUMNS}) "
         f"SELECT %s, n.namespace, n.id, {', '.join('n.' + c for c in _COLUMNS.split(', '))} "
         f"FROM nodes n WHERE n.namespace = %s{missing}").encode(),
        (snapshot_id, namespace, snapshot_id) if only_missing else (snapshot_id, namespace)
    ).rowcount


def write_draft(conn: Conn, namespace: str) -> int:
    """Replace the namespace's draft by one of its rows as they are now. Returns the
    oldest transaction (``xid8``) that was running when it began: a row written by a
    transaction not older than that may be missing from the draft or differ; any other
    row is in it as it is."""
    with conn.transaction():
        began = conn.execute(
            b"SELECT CAST(CAST(pg_snapshot_xmin(pg_current_snapshot()) AS text) AS bigint)"
        ).fetchone()
        assert began is not None
        conn.execute(b"DELETE FROM log_snapshots WHERE namespace = %s AND position = %s",
                     (namespace, DRAFT_POSITION))
        row = conn.execute(
            b"INSERT INTO log_snapshots (position, namespaces, nodes, namespace) "
            b"VALUES (%s, 1, 0, %s) RETURNING id", (DRAFT_POSITION, namespace)).fetchone()
        assert row is not None
        # ``nodes``: the draft's own row count (``_finish_from`` counts from it).
        drafted = _insert_rows(conn, int(row[0]), namespace, only_missing=False)
        conn.execute(b"UPDATE log_snapshots SET nodes = %s WHERE id = %s", (drafted, row[0]))
    return int(began[0])


def _finish_from(conn: Conn, snapshot_id: int, namespace: str, began: int) -> int:
    """Bring the draft up to date by the rows written since it began (``write_draft``'s
    answer): replace those; then, if the counts say some of the draft's nodes are gone,
    drop them. Two reads of the namespace's rows (the changed ones, the count), whatever
    its size; the rest is proportional to the writes since the draft. Returns the count."""
    # Written by a transaction not older than ``began`` (age() is wraparound-safe; +1:
    # age counts from this transaction's id, which may be one past the current one).
    conn.execute(
        (f"CREATE TEMP TABLE pk_move_changed ON COMMIT DROP AS SELECT n.namespace, n.id, "
         f"{', '.join('n.' + c for c in _COLUMNS.split(', '))} FROM nodes n "
         f"WHERE n.namespace = %s AND age(n.xmin) <= "
         f"CAST(CAST(pg_current_xact_id() AS text) AS bigint) - %s + 1").encode(),
        (namespace, began))
    deleted = conn.execute(
        b"DELETE FROM log_snapshot_nodes s USING pk_move_changed c WHERE s.snapshot_id = %s "
        b"AND s.namespace = c.namespace AND s.id = c.id", (snapshot_id,)).rowcount
    added = conn.execute(
        (f"INSERT INTO log_snapshot_nodes (snapshot_id, namespace, id, {_COLUMNS}) "
         f"SELECT %s, namespace, id, {_COLUMNS} FROM pk_move_changed").encode(),
        (snapshot_id,)).rowcount
    counts = conn.execute(
        b"SELECT nodes, (SELECT count(*) FROM nodes WHERE namespace = %s) "
        b"FROM log_snapshots WHERE id = %s", (namespace, snapshot_id)).fetchone()
    assert counts is not None
    # Every node now has its row in the draft, as it is; more rows than nodes: some of
    # the draft's nodes were deleted since.
    if int(counts[0]) - deleted + added != int(counts[1]):
        conn.execute(b"SET LOCAL enable_nestloop = off")
        conn.execute(
            b"DELETE FROM log_snapshot_nodes s WHERE s.snapshot_id = %s AND s.namespace = %s "
            b"AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.namespace = s.namespace "
            b"AND n.id = s.id)", (snapshot_id, namespace))
    return int(counts[1])


def finish(conn: Conn, namespace: str, position: int, began: int | None = None) -> None:
    """The namespace's snapshot at ``position`` (its rows final), from its draft if there
    is one: by the rows written since the draft began when ``began`` is known (the same
    mover wrote it), else by comparing every row. Runs inside the caller's transaction."""
    row = conn.execute(
        b"SELECT id FROM log_snapshots WHERE namespace = %s AND position = %s "
        b"ORDER BY id DESC LIMIT 1", (namespace, DRAFT_POSITION)).fetchone()
    if row is None:
        row = conn.execute(
            b"INSERT INTO log_snapshots (position, namespaces, nodes, namespace) "
            b"VALUES (%s, 1, 0, %s) RETURNING id", (DRAFT_POSITION, namespace)).fetchone()
        assert row is not None
        _insert_rows(conn, int(row[0]), namespace, only_missing=False)
    elif began is not None:
        count = _finish_from(conn, int(row[0]), namespace, began)
        conn.execute(b"UPDATE log_snapshots SET position = %s, taken_at = now(), nodes = %s "
                     b"WHERE id = %s", (position, count, int(row[0])))
        return
    else:
        snapshot_id = int(row[0])
        # Every column: comparing (id, version) alone measured no faster.
        cols = _COLUMNS.split(", ")
        # The draft's rows are minutes old and unanalyzed: the planner would guess them
        # few and compare them in a nested loop (15 s for 10,000 nodes); as hash
        # anti-joins both statements read each side once.
        conn.execute(b"SET LOCAL enable_nestloop = off")
        conn.execute(
            (f"DELETE FROM log_snapshot_nodes s WHERE s.snapshot_id = %s AND s.namespace = %s "
             f"AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.namespace = s.namespace "
             f"AND n.id = s.id AND ({', '.join('n.' + c for c in cols)}) IS NOT DISTINCT FROM "
             f"({', '.join('s.' + c for c in cols)}))").encode(),
            (snapshot_id, namespace))
        _insert_rows(conn, snapshot_id, namespace, only_missing=True)
    conn.execute(
        b"UPDATE log_snapshots SET position = %s, taken_at = now(), "
        b"nodes = (SELECT count(*) FROM nodes WHERE namespace = %s) WHERE id = %s",
        (position, namespace, int(row[0])))
