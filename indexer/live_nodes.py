"""Reading the live ``nodes`` rows as they are now (not the event log's snapshots:
those are ``indexer.retention``'s), with their paths, and whether the event log says a
subtree may have lost nodes since a position, inside the caller's transaction.

The worker calls these in one REPEATABLE READ transaction per batch, so every
document of a batch comes from one consistent state of the tree.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Generator, Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, Row, text

from coordinator import Node
from coordinator.db import streamed
from coordinator.event_reader import OWNED_NAMESPACE_SQL
from coordinator.events import (
    UNVERSIONED,
    VERSION_KEY,
    Created,
    Deleted,
    DomainEvent,
    MetadataSet,
    Moved,
    Written,
)
from coordinator.node_rows import node_of
from coordinator.subtree import FROM_NODE, subtree_cte

from .contract import index_entry_sql, tree_sql

# The nodes named are read once (``want``, a probe per id: as a filter ``id = ANY(ids)``
# on a namespace scan, which stale statistics chose, each row was tested against every
# id, 0.5 s for 1,000 ids in a namespace of 20,000 nodes); only their distinct parents
# walk up to the root, so a batch of 1,000 files in a handful of directories walks a
# handful of paths (a walk per id was 4,000 probes and a sort of them for 1,000 files:
# 30 ms of a read that now takes 13-17). A path is its names joined root first; the
# root's name is '' so the join yields '/a/b' (and '' for the root itself), and a node's
# path is its parent's and its own name. Each step up is one index probe per row (the LATERAL ...
# LIMIT 1 keeps the planner from flattening it into a join): guessing thousands of rows
# per level, it hashed every node of the namespace at each level, 0.21 s per 1,000 ids
# in a namespace of 200,000 nodes, against 0.028 s this way (and growing with the
# namespace, which this does not). The probe names (namespace, id) also as a row
# comparison, an index condition only of an index that starts (namespace, id) (as in
# pathkeeper_lock): with statistics from before a namespace filled, the planner guessed
# one row for it and took the (namespace, parent_id, name) index, filtering on the id:
# every step up read the whole namespace (0.34 s for 1,000 ids of a namespace of 1,000
# nodes). ``tree`` is a directory's ``tree_values``, so a node's is its parent's and its
# own path.
_PATHS_OF_IDS = """
    WITH RECURSIVE want AS (
        SELECT n.* FROM unnest(CAST(:ids AS uuid[])) AS w(id) CROSS JOIN LATERAL (
            SELECT * FROM nodes q
             WHERE q.namespace = :ns AND q.id = w.id AND (q.namespace, q.id) >= (:ns, w.id)
             LIMIT 1
        ) AS n
    ), up(start, id, parent_id, name, depth) AS (
        SELECT p.id, p.id, p.parent_id, p.name, 0
          FROM (SELECT DISTINCT parent_id FROM want) w CROSS JOIN LATERAL (
              SELECT q.id, q.parent_id, q.name FROM nodes q
               WHERE q.namespace = :ns AND q.id = w.parent_id
                 AND (q.namespace, q.id) >= (:ns, w.parent_id) LIMIT 1
          ) AS p
      UNION ALL
        SELECT u.start, p.id, p.parent_id, p.name, u.depth + 1
          FROM up u CROSS JOIN LATERAL (
              SELECT q.id, q.parent_id, q.name FROM nodes q
               WHERE q.namespace = :ns AND q.id = u.parent_id
                 AND (q.namespace, q.id) >= (:ns, u.parent_id) LIMIT 1
          ) AS p
         WHERE u.depth < 100000
    ), dirs AS (
        SELECT start, path, """ + tree_sql("path") + """ AS tree
          FROM (SELECT start, string_agg(name, '/' ORDER BY depth DESC) AS path
                  FROM up GROUP BY start) AS walked
    )
    SELECT {columns}
      FROM want n LEFT JOIN dirs d ON d.start = n.parent_id
           CROSS JOIN LATERAL (
               SELECT COALESCE(d.path || '/' || n.name, '') AS path, d.tree AS parent_tree
           ) AS paths
    """
_NODES_WITH_PATHS = text(_PATHS_OF_IDS.format(
    columns="n.id, n.parent_id, n.name, n.kind, n.version, n.content, n.metadata, paths.path"))

# Bound as typed values: the rendering functions take any type, so an untyped parameter
# would leave PostgreSQL unable to tell what it is.
_INDEX, _NS, _SEQ = "CAST(:index AS text)", "CAST(:ns AS text)", "CAST(:seq AS bigint)"

# The same nodes' ``_bulk`` entries rendered by PostgreSQL (``contract.index_entry_sql``;
# NULL for a namespace root), by id as text: no row becomes a ``Node``.
_ENTRIES_OF_IDS = text(_PATHS_OF_IDS.format(
    columns="CAST(n.id AS text) AS id, "
    + index_entry_sql(_INDEX, "n", "COALESCE(NULLIF(paths.path, ''), '/')", _SEQ, _NS,
                      tree="array_append(paths.parent_tree, paths.path)")
    + " AS entry"))

_COLUMNS = ("id", "parent_id", "name", "kind", "version", "content", "metadata")

# The subtree of the node :id, each row carrying its write version: the highest
# position among the moves (of the batch being applied) of the directories on its way
# down from the top, i.e. the position of the last move that changed its path.
# Order-independent: the version travels with the row, whatever order the server
# emits rows in. Each row is rendered as its ``_bulk`` index entry at that version
# (``contract.index_entry_sql``): no row becomes a ``Node`` in Python.
_SUBTREE_ENTRIES = text(
    subtree_cte(
        _COLUMNS,
        FROM_NODE,
        before="moves(id, pos) AS ("
        "SELECT * FROM unnest(CAST(:move_ids AS uuid[]), CAST(:move_pos AS bigint[])))",
        carry=[("write_version", "CAST(:top_version AS bigint)",
                "GREATEST(s.write_version, COALESCE(m.pos, 0))")],
        join="LEFT JOIN moves m ON m.id = n.id",
    )
    + "SELECT CAST(sub.id AS text) AS id, sub.write_version, "
    + index_entry_sql(_INDEX, "sub", "sub.path", "sub.write_version", _NS)
    + " AS entry FROM sub"
)


def _is(cls: type[DomainEvent]) -> str:
    """SQL: the event row is of ``cls``'s type and payload version."""
    return (f"(type = '{cls.TYPE}' AND "
            f"COALESCE(payload->>'{VERSION_KEY}', '{UNVERSIONED}') = '{cls.VERSION}')")


# Events that cannot take a node out of a directory's subtree: creates, content and
# metadata changes, a file moved or deleted (a file has no subtree: its own event
# rewrites its document by id), a directory renamed in place. Anything else can: a
# directory deleted or moved to another parent, a dropped namespace, and (to be safe)
# a type or payload version this code does not know.
_LEFT_SINCE = text(
    f"""
    SELECT EXISTS (
      SELECT 1 FROM events
       WHERE namespace = :ns AND position > :after
         AND NOT ({_is(Created)} OR {_is(Written)} OR {_is(MetadataSet)}
                  OR (({_is(Moved)} OR {_is(Deleted)}) AND payload->>'kind' = 'file')
                  OR ({_is(Moved)} AND payload->>'parent_id' = payload->>'old_parent_id'))
    )
    """
)


def may_have_left(conn: Connection, ns: str, after: int) -> bool:
    """Whether, in this snapshot, an event of ``ns`` after position ``after`` may have
    taken a node out of some directory's subtree (see ``_LEFT_SINCE``). One range of
    the events' primary key, from ``after`` to the end of the snapshot."""
    return bool(conn.execute(_LEFT_SINCE, {"ns": ns, "after": after}).scalar_one())


def _node(ns: str, row: Row[Any]) -> Node:
    return node_of(ns, row, row.path or "/")  # the root's path aggregates to ''


def _uuid_or_none(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


#: A node id as the server writes it (``CAST(id AS text)``, ``str(uuid)``).
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def fetch_nodes(conn: Connection, ns: str, ids: Sequence[str]) -> dict[str, Node]:
    """The nodes among ``ids`` that exist now, by id, with their current paths."""
    wanted = [u for u in (_uuid_or_none(i) for i in ids) if u is not None]
    if not wanted:
        return {}
    rows = conn.execute(_NODES_WITH_PATHS, {"ns": ns, "ids": wanted})
    return {str(r.id): _node(ns, r) for r in rows}


def fetch_entries(
    conn: Connection, index: str, ns: str, ids: Sequence[str], seq: int
) -> dict[str, bytes | None]:
    """The nodes among ``ids`` that exist now, by id: each one's ``_bulk`` index entry
    into ``index`` at external version ``seq`` as PostgreSQL rendered it
    (``contract.index_entry_sql``), None for a namespace root (not indexed)."""
    # As text, cast by the server: a UUID object per id cost more than its document. An
    # id in another form than the server's text of it (not from an event nor from a
    # document of ours) is never found, as before.
    wanted = [i for i in ids if _CANONICAL_UUID.fullmatch(i)]
    if not wanted:
        return {}
    rows = conn.execute(_ENTRIES_OF_IDS, {"ns": ns, "ids": wanted, "index": index,
                                          "seq": seq})
    return {node_id: None if entry is None else entry.encode()
            for node_id, entry in rows}


def stream_subtree_entries(
    conn: Connection, index: str, top: Node, top_version: int, moves: dict[str, int],
    chunk: int = 1000,
) -> Generator[tuple[str, int, bytes | None], None, None]:
    """Every node under ``top`` (``top`` included), in no particular order, as (id,
    write version, its ``_bulk`` index entry into ``index`` at that version, None for a
    namespace root). The write version is the largest of ``top_version`` and
    ``moves[d]`` over the directories ``d`` from the top down to the node (itself
    included). Streamed ``chunk`` rows at a time (``coordinator.db.streamed``: a caller
    that may stop early closes it)."""
    ids = [uuid.UUID(i) for i in moves]
    params = {"ns": top.namespace, "id": uuid.UUID(top.id), "path": top.path,
              "top_version": top_version, "move_ids": ids, "move_pos": list(moves.values()),
              "index": index}
    for row in streamed(conn, _SUBTREE_ENTRIES, params, chunk):
        entry = row.entry
        yield row.id, row.write_version, None if entry is None else entry.encode()


def node_exists(engine: Engine, ns: str, node_id: str) -> bool:
    """Whether ``node_id`` is a node of ``ns`` now (a statement of its own: the newest
    committed state, not a batch's snapshot). Deleted nodes never come back, so a node
    that exists has no delete in the index yet (``indexer.bulk.Alive``)."""
    wanted = _uuid_or_none(node_id)
    if wanted is None:
        return False
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT EXISTS (SELECT 1 FROM nodes WHERE namespace = :ns AND id = :id)"),
            {"ns": ns, "id": wanted},
        ).scalar_one() is True


NAMESPACE_WALK = subtree_cte(
    ("id", "parent_id", "name", "kind", "version", "content", "metadata"),
    "namespace = :ns AND parent_id IS NULL",
    top_path="CAST('/' AS text)",
)


_OWNED_NAMESPACES = text(
    "SELECT name FROM namespaces n WHERE "
    + OWNED_NAMESPACE_SQL.format(ns="n.name") + " ORDER BY name"
)


def owned_namespaces(conn: Connection) -> list[str]:
    """The namespaces whose ``nodes`` rows are this server's, by name, in the
    connection's current transaction: not one a move is copying here (``incoming``: a
    partial copy must never reach the index) nor one moved away (``gone``: its leftovers
    are being deleted; the index holds the new server's documents). docs/sharding.md."""
    return list(conn.execute(_OWNED_NAMESPACES).scalars())


def placed_elsewhere(conn: Connection) -> list[str]:
    """The namespaces ``owned_namespaces`` leaves out for a move (incoming or gone here),
    whether or not they have rows here: their documents are another server's to keep."""
    return list(conn.execute(text(
        "SELECT namespace FROM namespace_placement WHERE state IN ('incoming', 'gone') "
        "ORDER BY namespace")).scalars())


_WALK_ENTRIES = text(
    NAMESPACE_WALK + "SELECT CAST(sub.id AS text) AS id, "
    + index_entry_sql(_INDEX, "sub", "sub.path", _SEQ, _NS) + " AS entry FROM sub"
)


def walk_entries(
    conn: Connection, namespace: str, index: str, seq: int
) -> Iterator[tuple[str, bytes]]:
    """Every indexed node of ``namespace`` as (id, its ``_bulk`` index entry into
    ``index`` at external version ``seq``, rendered by PostgreSQL), streamed from the
    connection's current transaction (``walk_nodes`` without a ``Node`` per row)."""
    params = {"ns": namespace, "index": index, "seq": seq}
    for row in streamed(conn, _WALK_ENTRIES, params, 2000):
        entry = row.entry
        if entry is not None:  # the root: not indexed
            yield row.id, entry.encode()


def walk_nodes(conn: Connection, namespace: str, order_by_id: bool = False) -> Iterator[Node]:
    """Every node of ``namespace`` (root included) with its path, streamed from the
    connection's current transaction; sorted by id when asked."""
    sql = NAMESPACE_WALK + "SELECT * FROM sub" + (" ORDER BY id" if order_by_id else "")
    for r in streamed(conn, text(sql), {"ns": namespace}, 2000):
        yield node_of(namespace, r, r.path)
