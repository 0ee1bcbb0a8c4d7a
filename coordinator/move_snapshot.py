"""The snapshot of a moved namespace alone that its new shard folds from (its history
there begins at the flip, docs/sharding.md section 3), written in two parts so that the
freeze pays only for what changed:

* ``write_draft`` (before the freeze, while the copy runs on): a snapshot of the copied
  rows as they are, at position 0. The namespace is ``incoming`` on the shard, so no
  reader of the log or of snapshots looks at it, and position 0 is never the newest
  snapshot of anything;
* ``finish`` (at the flip, the rows final): brings the draft to the rows' final state
  (drops the rows that differ from ``nodes`` or are gone, adds the ones missing) and sets
  its position. A draft that is gone (a compaction on the shard removed it) is written
  whole instead.

Measured figures: docs/sharding.md section 3, "As built".
"""

from __future__ import annotations

from .move_replication import Conn

_COLUMNS = "parent_id, name, kind, content, metadata, version"
#: Position of a draft (not a snapshot of any point of the log yet).
DRAFT_POSITION = 0


def _insert_rows(conn: Conn, snapshot_id: int, namespace: str, only_missing: bool) -> None:
    missing = (" AND NOT EXISTS (SELECT 1 FROM log_snapshot_nodes s WHERE s.snapshot_id = %s "
               "AND s.namespace = n.namespace AND s.id = n.id)") if only_missing else ""
    conn.execute(
        (f"INSERT INTO log_snapshot_nodes (snapshot_id, namespace, id, {_COLUMNS}) "
         f"SELECT %s, n.namespace, n.id, {', '.join('n.' + c for c in _COLUMNS.split(', '))} "
         f"FROM nodes n WHERE n.namespace = %s{missing}").encode(),
        (snapshot_id, namespace, snapshot_id) if only_missing else (snapshot_id, namespace))


def write_draft(conn: Conn, namespace: str) -> None:
    """Replace the namespace's draft by one of its rows as they are now."""
    with conn.transaction():
        conn.execute(b"DELETE FROM log_snapshots WHERE namespace = %s AND position = %s",
                     (namespace, DRAFT_POSITION))
        row = conn.execute(
            b"INSERT INTO log_snapshots (position, namespaces, nodes, namespace) "
            b"VALUES (%s, 1, (SELECT count(*) FROM nodes WHERE namespace = %s), %s) "
            b"RETURNING id", (DRAFT_POSITION, namespace, namespace)).fetchone()
        assert row is not None
        _insert_rows(conn, int(row[0]), namespace, only_missing=False)


def finish(conn: Conn, namespace: str, position: int) -> None:
    """The namespace's snapshot at ``position`` (its rows final), from its draft if there
    is one. Runs inside the caller's transaction."""
    row = conn.execute(
        b"SELECT id FROM log_snapshots WHERE namespace = %s AND position = %s "
        b"ORDER BY id DESC LIMIT 1", (namespace, DRAFT_POSITION)).fetchone()
    if row is None:
        row = conn.execute(
            b"INSERT INTO log_snapshots (position, namespaces, nodes, namespace) "
            b"VALUES (%s, 1, 0, %s) RETURNING id", (DRAFT_POSITION, namespace)).fetchone()
        assert row is not None
        _insert_rows(conn, int(row[0]), namespace, only_missing=False)
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
