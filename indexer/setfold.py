"""The event log folded by PostgreSQL, set at a time: what replay, verify and snapshots use.

The one fold of the log in production. Folding events one by one in Python ran at
57,700 events/s in memory and 4,900 events/s once a namespace spilled to PostgreSQL;
this fold instead asks PostgreSQL for the final state of every node in a few statements
whose cost is one scan of the log plus work proportional to the nodes, never a Python
step per event. It is tested against the test suite's own sequential fold of the wire
events (``tests/reliability/fold_check.py``; ``tests/replay/test_setfold.py``: a
hypothesis property test over random histories, and every transaction boundary of
concurrent histories).

Why the final state is a function of each node's LAST events (valid logs, i.e. logs the
coordinator writes: no event names a node that does not exist at that point, ids are
never reused, a move never makes a cycle):

* content, metadata, kind, name, parent, version: each is the value of the node's last
  event that sets it (``created``/``written`` for content, ``created`` or ``written``
  with metadata for metadata, ``created``/``moved`` for parent and name, and any of the
  three for the version);
* life: a node is live at the end iff it is not deleted itself and its parent as of its
  last ``created``/``moved`` is live, i.e. iff it is reachable from the root in the tree
  of final parents with directly deleted nodes left out. Proof: a node killed by the
  recursive delete of an ancestor X at position t has no event after t, nor has any node
  of X's subtree at t; so its final parent, and that parent's, and so on, are its
  ancestors at t, up to X, which is deleted itself: the one path from it towards the root
  passes through X and it is unreachable. A node moved out of X before t has a later
  ``moved`` whose parent is outside X's subtree at t: it stays reachable (the case that
  makes a naive "delete everything under X" fold wrong). Conversely a live node's final
  parent chain is its current one, all live, up to the root.
* a namespace's current generation is everything after its last ``namespace_created``
  (gone if a ``namespace_dropped`` follows); node ids are never reused, so the nodes of
  an earlier generation are those created before it, and are left out.

Paths are computed once, by one recursive walk from the roots over the final tree (which
is also the reachability above). So the cost is: a scan of the events in range per part
of the aggregate by node (``PARALLEL`` parts by node id, aggregated side by side by
parallel workers: the fields of each node's last events of each kind), an index lookup
per node whose last write carried no metadata, the walk, and streaming the result. Memory
is PostgreSQL's ``work_mem`` (``WORK_MEM``) per process of the fold (``PARALLEL``
processes during the aggregate, one after); aggregates and sorts beyond it spill to
temporary files, whatever the size of the namespace.

A fold starts from the newest stored snapshot at or below its ``until``
(``indexer.retention``): the snapshot's nodes are the state as of its position, and
the events after it are folded over them exactly as above (a snapshot's node is like a
``created`` at the snapshot's position).

A fold may be one ``FoldPart`` of several (replay folds the next part while the last one
loads): the live nodes whose id hashes to the part, from the events of those nodes plus
the tree events (``created``, ``moved``, ``deleted``) of every directory and the
namespaces' events. That is the whole fold restricted to the part's nodes: parents are
always directories (the schema's foreign key), so a file is a leaf and its events change
no other node; every directory's parent, name, creation and deletion are folded in every
part, so the tree of final parents, hence life and paths, is the whole fold's, and a
node of the part has all of its own events. (Every ``created``, ``moved`` and ``deleted``
event names its node's kind: ``coordinator.events``.) A directory of another part is
walked but not returned; its other fields (metadata, version) may be partial there.
Parts read one exported snapshot (``fold(snapshot=)``), so together they are one cut.

Inconsistent logs (events on a node that does not exist, a node created twice, events
after a delete) are counted as anomalies, from the same aggregate, as far as one pass
can tell; unlike a sequential fold this one does not replay the log's intermediate
states, so an inconsistency it cannot see still shows in ``verify``'s comparison with
the ``nodes`` table.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, text

from coordinator import Node
from coordinator.db import streamed
from coordinator.event_reader import OWNED_EVENT_SQL, OWNED_NAMESPACE_SQL, horizon
from coordinator.events import (
    EVENT_TYPES,
    UNVERSIONED,
    VERSION_KEY,
    Created,
    Deleted,
    MetadataSet,
    Moved,
    NamespaceCreated,
    NamespaceDropped,
    Written,
)
from coordinator.node_rows import node_of

from .contract import index_entry_sql
from .errors import IndexerError

#: Memory PostgreSQL may use per sort or hash of the fold before it spills to temporary
#: files (a hash may use ``hash_mem_multiplier`` times this, 2 by default). The fold's
#: one big hash is the per-node aggregate (~700 bytes a node, measured: 14 aggregates'
#: states plus the arrays of two last events): 128MB keeps ~370,000 nodes a part in
#: memory, larger namespaces spill, which costs time, never memory. Each of the
#: ``PARALLEL`` processes of the aggregate has its own: 2 x 256MB at the defaults.
WORK_MEM = os.environ.get("PATHKEEPER_FOLD_WORK_MEM", "128MB")
#: Rows per fetch when streaming the folded nodes.
STREAM_CHUNK = 5000

_names = itertools.count()


#: Anomalies reported in full; the rest are counted.
MAX_ANOMALIES_KEPT = 100


@dataclass
class Anomalies:
    """Inconsistencies met while folding: the first few in full, and a count."""

    count: int = 0
    first: list[str] = field(default_factory=list)

    def add(self, message: str) -> None:
        self.count += 1
        if len(self.first) < MAX_ANOMALIES_KEPT:
            self.first.append(message)


class LogCompacted(IndexerError):
    """The state asked for needs events that compaction deleted, or (``namespace``) that
    were written on the server a namespace was moved from: its history here starts at
    its move (``horizon`` is then its ``log_from``)."""

    def __init__(self, until: int, horizon: int, namespace: str | None = None) -> None:
        self.until = until
        self.horizon = horizon
        self.namespace = namespace
        if namespace is not None:
            super().__init__(
                f"namespace {namespace} was moved to this server at position {horizon}: "
                f"its state as of position {until} is not in this server's log (the oldest "
                f"state it has here is as of position {horizon}; earlier ones are on the "
                "server it came from until that server's cleanup)"
            )
            return
        super().__init__(
            f"the event log was compacted up to position {horizon}: the state as of "
            f"position {until} is no longer available (the oldest state the log still "
            f"has is as of position {horizon})"
        )


@dataclass(frozen=True)
class FoldStart:
    """Where a fold starts: a stored snapshot (id, position) or the empty log (None, 0)."""

    snapshot_id: int | None
    position: int


def pick_base(conn: Connection, until: int, use_snapshots: bool = True) -> FoldStart:
    """The newest snapshot of every namespace at or below ``until``, or the start of the
    log; raises ``LogCompacted`` if events the fold would need are gone. (A snapshot of
    one namespace, which a move writes, is that namespace's base: ``moved_in``.)"""
    cut = horizon(conn)
    if until < cut:
        raise LogCompacted(until, cut)
    if use_snapshots or cut > 0:
        row = conn.execute(
            text(
                "SELECT id, position FROM log_snapshots WHERE position <= :until "
                "AND position >= :cut AND namespace IS NULL "
                "ORDER BY position DESC, id DESC LIMIT 1"
            ),
            {"until": until, "cut": cut},
        ).first()
        if row is not None:
            return FoldStart(int(row.id), int(row.position))
    if cut > 0:
        # No snapshot at or above the horizon: compaction never leaves this state
        # (it deletes events only up to a snapshot it keeps), but say so if it happens.
        raise LogCompacted(until, cut)
    return FoldStart(None, 0)


def moved_in(
    conn: Connection, base: FoldStart, until: int, namespaces: Sequence[str] | None
) -> dict[str, FoldStart]:
    """The namespaces whose fold starts from a snapshot of their own instead of ``base``:
    a namespace moved to this server has its history here from its move on, and the move
    wrote a snapshot of it alone at its ``log_from`` (docs/sharding.md, section 3). Each
    takes the newest snapshot that covers it: its own (at or above its ``log_from``) if
    that is newer than ``base`` or ``base`` does not hold it (a snapshot of every
    namespace taken while it was still being copied here). Raises ``LogCompacted`` for a
    namespace whose state as of ``until`` is not in this server's log: ``until`` below its
    ``log_from``, or no snapshot here covers it."""
    cut = horizon(conn)
    nss = None if namespaces is None else list(namespaces)
    log_from = {str(ns): int(f) for ns, f in conn.execute(text(
        "SELECT namespace, log_from FROM namespace_placement "
        "WHERE state IN ('active', 'frozen') AND log_from > 0 "
        "AND (CAST(:nss AS text[]) IS NULL OR namespace = ANY(CAST(:nss AS text[])))"
    ), {"nss": nss})}
    own = {str(r.namespace): FoldStart(int(r.id), int(r.position)) for r in conn.execute(text(
        "SELECT DISTINCT ON (s.namespace) s.namespace, s.id, s.position FROM log_snapshots s "
        "WHERE s.namespace IS NOT NULL AND s.position <= :until AND s.position >= :cut "
        "AND s.position >= coalesce((SELECT p.log_from FROM namespace_placement p "
        "                            WHERE p.namespace = s.namespace), 0) "
        "AND (CAST(:nss AS text[]) IS NULL OR s.namespace = ANY(CAST(:nss AS text[]))) "
        "ORDER BY s.namespace, s.position DESC, s.id DESC"
    ), {"until": until, "cut": cut, "nss": nss})}
    in_base = set()
    if base.snapshot_id is not None and (own or log_from):
        in_base = {str(ns) for ns in conn.execute(text(
            "SELECT namespace FROM log_snapshot_nodes WHERE snapshot_id = :sid "
            "AND parent_id IS NULL AND namespace = ANY(CAST(:nss AS text[]))"
        ), {"sid": base.snapshot_id, "nss": sorted(set(own) | set(log_from))}).scalars()}
    starts: dict[str, FoldStart] = {}
    for ns in sorted(set(own) | set(log_from)):
        first = log_from.get(ns, 0)
        if until < first:
            raise LogCompacted(until, first, ns)
        snap = own.get(ns)
        if snap is not None and (snap.position > base.position or ns not in in_base):
            starts[ns] = snap
        elif first and not (ns in in_base and base.position >= first):
            raise LogCompacted(until, first, ns)
    return starts


def _snapshot_rows(alias: str, own: bool) -> str:
    """SQL: the row of ``log_snapshot_nodes`` (``alias``) is in its namespace's base
    snapshot: ``:sid``, or for the namespaces of ``:own_nss`` their own (``moved_in``)."""
    if not own:
        return f"{alias}snapshot_id = :sid"
    return (f"(({alias}snapshot_id = :sid AND {alias}namespace <> ALL(CAST(:own_nss AS text[])))"
            f" OR ({alias}snapshot_id, {alias}namespace) IN (SELECT u.sid, u.ns FROM "
            "unnest(CAST(:own_sids AS bigint[]), CAST(:own_nss AS text[])) AS u(sid, ns)))")


#: With namespaces of their own base (``moved_in``): each of their events counts after
#: its base's position, every other namespace's after the common base's.
_OWN_START = (
    "AND position > coalesce((SELECT u.pos FROM unnest(CAST(:own_nss AS text[]), "
    "CAST(:own_pos AS bigint[])) AS u(ns, pos) WHERE u.ns = events.namespace), :base_after)"
)


# One scan of the events in range (of each part, see ``PARALLEL``): for each node, the
# positions of its last events of each kind, and the fields those last events set. The
# fields ride along in ``max(ARRAY[zero-padded position, field, ...])``: arrays compare
# element by element, so the maximum is the array of the node's last such event. This
# costs more per row than ``max(position)`` alone, but saves looking up each live node's
# payloads afterwards (two random index reads per node, measured 2x slower at 1,000,000
# nodes). node_id is the id the coordinator also writes into the payload; namespace
# events carry the root's id. Type names are bind parameters (``EVENT_PARAMS``), from
# ``coordinator.events``; the payload keys read are those of its classes
# (``tests/replay/test_setfold.py`` checks). An event of a type or payload version not
# known there counts as ``unknown`` (an anomaly), as the reference fold's decoding does.
# The outer select turns each node's arrays into typed fields in the process that
# aggregated it, not in the final state's one process.
AGG_SQL = """
SELECT namespace, node_id, ns_created, ns_dropped, c_pos, c_count, m_pos, d_pos,
       first_change, last_pos, n, unknown, kind,
       CAST(link[1] AS bigint) AS l_pos, CAST(link[2] AS uuid) AS parent_id,
       link[3] AS name,
       CAST(cont[1] AS bigint) AS w_pos, cont[2] AS content,
       -- The metadata of the node's last event that sets it (m_pos), if that event is
       -- one whose fields ride here: the last metadata_set, or the last create or write,
       -- when it carried metadata. Otherwise (a write without metadata came after it)
       -- the final state looks that event up.
       CASE WHEN meta[1] = lpad(CAST(m_pos AS text), 19, '0') THEN CAST(meta[2] AS jsonb)
            WHEN cont[4] IS NOT NULL THEN CAST(cont[4] AS jsonb) END AS metadata,
       (meta[1] = lpad(CAST(m_pos AS text), 19, '0')) IS TRUE OR cont[4] IS NOT NULL
           AS m_found,
       CAST((greatest(
           CASE WHEN link IS NOT NULL THEN ARRAY[link[1], link[4]] END,
           CASE WHEN cont IS NOT NULL THEN ARRAY[cont[1], cont[3]] END,
           CASE WHEN meta IS NOT NULL THEN ARRAY[meta[1], meta[3]] END))[2] AS bigint)
           AS version
FROM (
    SELECT namespace, node_id,
           max(position) FILTER (WHERE type = :t_namespace_created) AS ns_created,
           max(position) FILTER (WHERE type = :t_namespace_dropped) AS ns_dropped,
           max(position) FILTER (WHERE type = :t_created) AS c_pos,
           count(*) FILTER (WHERE type = :t_created) AS c_count,
           max(position) FILTER (
               WHERE type IN (:t_created, :t_metadata_set)
                  OR (type = :t_written AND payload -> 'metadata' <> CAST('null' AS jsonb))
           ) AS m_pos,
           min(position) FILTER (WHERE type = :t_deleted) AS d_pos,
           min(position) FILTER (
               WHERE type IN (:t_written, :t_metadata_set, :t_moved, :t_deleted)
           ) AS first_change,
           max(position) AS last_pos,
           count(*) AS n,
           count(*) FILTER (
               WHERE type || ':' || coalesce(payload ->> CAST(:version_key AS text),
                                             CAST(:unversioned AS text))
                     <> ALL(CAST(:known_events AS text[]))
           ) AS unknown,
           max(payload ->> 'kind') FILTER (WHERE type = :t_created) AS kind,
           max(ARRAY[lpad(CAST(position AS text), 19, '0'), payload ->> 'parent_id',
                     payload ->> 'name', payload ->> 'version'])
               FILTER (WHERE type IN (:t_created, :t_moved)) AS link,
           max(ARRAY[lpad(CAST(position AS text), 19, '0'), payload ->> 'content',
                     payload ->> 'version',
                     CAST(CASE WHEN type = :t_created
                               THEN coalesce(nullif(payload -> 'metadata', CAST('null' AS jsonb)),
                                             CAST('{{}}' AS jsonb))
                               ELSE nullif(payload -> 'metadata', CAST('null' AS jsonb))
                          END AS text)])
               FILTER (WHERE type IN (:t_created, :t_written)) AS cont,
           max(ARRAY[lpad(CAST(position AS text), 19, '0'), CAST(payload -> 'metadata' AS text),
                     payload ->> 'version'])
               FILTER (WHERE type = :t_metadata_set) AS meta
    FROM events
    WHERE position > :after AND position <= :until {ns_filter} {part_filter}
    GROUP BY namespace, node_id
) per_node
"""

#: Processes that aggregate the log at once (``PATHKEEPER_FOLD_PARALLEL``; 1: the leader
#: alone). The aggregate is split into this many parts by a hash of the node id: every
#: part is the same scan of the events, keeping only its nodes, and an aggregate of its
#: own, so each node's events are grouped by one process and the parts' rows are simply
#: appended (no partial aggregates to combine). PostgreSQL runs the parts in parallel
#: workers (a Parallel Append under a Gather; the leader takes a part too) when the
#: planner finds it cheaper, i.e. for logs of more than a few thousand events, and when
#: the server has workers free (``max_parallel_workers``, 8 by default); otherwise the
#: leader runs the parts one after the other, which costs one more scan of the events.
#: Each process holds its own ``work_mem``: the fold may hold PARALLEL times as much.
PARALLEL = int(os.environ.get("PATHKEEPER_FOLD_PARALLEL", "2"))

#: Planner settings of the aggregate statement. Every part must be one process's whole
#: aggregate, never a parallel scan below a partial aggregate of its own: a node's events
#: are spread over the whole log, so each worker's partial aggregate would see nearly
#: every node of the part and repeat the grouping (1.5-2x the CPU, measured), hence the
#: scan sizes no table reaches.
AGG_SETTINGS: dict[str, str] = {
    "min_parallel_table_scan_size": "715827882",  # blocks: the largest value it takes
    "min_parallel_index_scan_size": "715827882",
    "parallel_leader_participation": "on",
}


def agg_sql(table: str, ns_filter: str, parts: int, spread: int = 1) -> str:
    """``AGG_SQL`` into the temporary ``table``, split into ``parts`` by node id (by the
    hash divided by ``spread``: independent of a ``FoldPart`` of ``spread`` parts)."""
    if parts <= 1:
        return f"CREATE TEMPORARY TABLE {table} AS " + AGG_SQL.format(
            ns_filter=ns_filter, part_filter="")
    # coalesce: the rows without a node id, if any, are all in part 0.
    return f"CREATE TEMPORARY TABLE {table} AS SELECT * FROM (" + "\nUNION ALL\n".join(
        f"SELECT * FROM ({AGG_SQL.format(ns_filter=ns_filter, part_filter=part)}) p{k}"
        for k in range(parts)
        for part in [f"AND {_part_hash('node_id')} % {parts} = {k}" if spread == 1
                     else f"AND ({_part_hash('node_id')} / {spread}) % {parts} = {k}"]
    ) + ") parts"

#: The bind parameters ``AGG_SQL`` takes from ``coordinator.events``: ``t_<type>`` for
#: each type name, and what tells a known (type, payload version) from an unknown one.
EVENT_PARAMS: dict[str, Any] = {
    "t_namespace_created": NamespaceCreated.TYPE,
    "t_namespace_dropped": NamespaceDropped.TYPE,
    "t_created": Created.TYPE,
    "t_written": Written.TYPE,
    "t_metadata_set": MetadataSet.TYPE,
    "t_moved": Moved.TYPE,
    "t_deleted": Deleted.TYPE,
    "version_key": VERSION_KEY,
    "unversioned": str(UNVERSIONED),
    "known_events": [f"{name}:{cls.VERSION}" for name, cls in EVENT_TYPES.items()],
}

# The namespaces alive at the end: created in the range (``since`` = that position;
# the root is the node of that event), or continuing from the snapshot (``since`` NULL).
GEN_SQL = """
CREATE TEMPORARY TABLE {gen} AS
WITH t AS (
    SELECT namespace, max(ns_created) AS created, max(ns_dropped) AS dropped
    FROM {agg} GROUP BY namespace
), s AS (
    SELECT n.namespace, n.id AS root_id FROM log_snapshot_nodes n
    WHERE {snap} AND n.parent_id IS NULL {ns_filter} {owned}
)
SELECT coalesce(t.namespace, s.namespace) AS namespace, t.created AS since,
       CASE WHEN t.created IS NOT NULL
            THEN (SELECT a.node_id FROM {agg} a
                  WHERE a.namespace = t.namespace AND a.ns_created = t.created LIMIT 1)
            ELSE s.root_id END AS root_id
FROM t FULL JOIN s ON s.namespace = t.namespace
WHERE (t.created IS NOT NULL AND (t.dropped IS NULL OR t.dropped < t.created))
   OR (t.created IS NULL AND s.namespace IS NOT NULL AND t.dropped IS NULL)
"""

# The final state of every node of a live namespace that is not deleted: the snapshot's
# row, overridden field by field by the node's last events in range. Metadata needs a
# lookup only when the node's last write carried none (it keeps the one before); LIMIT 1
# keeps that an index read per such node (without it the planner may turn it into a hash
# join over the whole log).
STATE_SQL = """
CREATE TEMPORARY TABLE {state} AS
WITH s AS (
    SELECT n.* FROM log_snapshot_nodes n JOIN {gen} g
      ON g.namespace = n.namespace AND g.since IS NULL
    WHERE {snap} {snap_part}
), j AS (
    SELECT coalesce(a.namespace, s.namespace) AS namespace, coalesce(a.node_id, s.id) AS id,
           a.l_pos, a.parent_id, a.name, a.kind, a.w_pos, a.content, a.m_pos, a.metadata,
           a.m_found, a.version,
           s.parent_id AS s_parent, s.name AS s_name, s.kind AS s_kind,
           s.content AS s_content, s.metadata AS s_metadata, s.version AS s_version,
           g.root_id, g.since
    FROM {agg} a FULL JOIN s ON s.namespace = a.namespace AND s.id = a.node_id
    JOIN {gen} g ON g.namespace = coalesce(a.namespace, s.namespace)
    WHERE a.d_pos IS NULL
      AND (s.id IS NOT NULL OR a.c_pos > coalesce(g.since, -1))
)
SELECT j.namespace, j.id,
       CASE WHEN j.l_pos IS NULL THEN j.s_parent ELSE j.parent_id END AS parent_id,
       CASE WHEN j.l_pos IS NULL THEN j.s_name ELSE j.name END AS name,
       coalesce(j.kind, j.s_kind) AS kind,
       CASE WHEN j.w_pos IS NULL THEN j.s_content ELSE j.content END AS content,
       CASE WHEN j.m_pos IS NULL THEN j.s_metadata
            WHEN j.m_found THEN j.metadata
            ELSE coalesce(nullif(m.payload -> 'metadata', CAST('null' AS jsonb)),
                          CAST('{{}}' AS jsonb)) END AS metadata,
       coalesce(j.version, j.s_version) AS version
FROM j
LEFT JOIN LATERAL (
    SELECT e.payload FROM events e
    WHERE j.m_pos IS NOT NULL AND NOT j.m_found AND j.w_pos IS NOT NULL
      AND e.position = j.m_pos
    LIMIT 1
) m ON true
WHERE j.id <> j.root_id OR j.since IS NULL  -- a new generation's root is made below
UNION ALL
SELECT namespace, root_id, NULL, '', 'dir', NULL, CAST('{{}}' AS jsonb), 1
FROM {gen} WHERE since IS NOT NULL
"""

# Paths, once, from the roots down: only what the roots reach is live (see above).
# Each level of the walk is a hash join of the level's nodes with the state table, i.e.
# one scan of it per level: cheaper than building an index and probing it once per node
# (measured 2.4 s against 1.8 s + 4.9 s at 1,000,000 nodes) as long as trees are shallow.
# Past SHALLOW levels the walk stops; if nodes are left at that depth, the rest of the
# walk continues from them with an index (one probe per node, whatever the depth: paths
# may be up to 256 levels deep).
SHALLOW = 24
STATE_PATHS_SQL = """
CREATE TEMPORARY TABLE {nodes} AS
WITH RECURSIVE walk AS (
    SELECT s.namespace, s.id, s.parent_id, s.name, s.kind, s.content, s.metadata, s.version,
           CAST('/' AS text) AS path, 0 AS depth
    FROM {state} s JOIN {gen} g ON g.namespace = s.namespace AND g.root_id = s.id
  UNION ALL
    SELECT n.namespace, n.id, n.parent_id, n.name, n.kind, n.content, n.metadata, n.version,
           CASE WHEN w.path = '/' THEN '/' || n.name ELSE w.path || '/' || n.name END,
           w.depth + 1
    FROM walk w JOIN {state} n ON n.namespace = w.namespace AND n.parent_id = w.id
    WHERE w.depth < {shallow}
)
SELECT * FROM walk
"""
DEEP_STATE_PATHS_SQL = """
INSERT INTO {nodes}
WITH RECURSIVE walk AS (
    SELECT namespace, id, parent_id, name, kind, content, metadata, version, path, depth
    FROM {nodes} WHERE depth = {shallow}
  UNION ALL
    SELECT n.namespace, n.id, n.parent_id, n.name, n.kind, n.content, n.metadata, n.version,
           w.path || '/' || n.name, w.depth + 1
    FROM walk w JOIN {state} n ON n.namespace = w.namespace AND n.parent_id = w.id
)
SELECT * FROM walk WHERE depth > {shallow}
"""

ANOMALY_SQL = """
SELECT a.namespace, a.node_id, a.c_count, a.c_pos, a.first_change, a.d_pos, a.last_pos,
       a.unknown, g.since, (s.id IS NOT NULL) AS in_snapshot
FROM {agg} a
JOIN {gen} g ON g.namespace = a.namespace
LEFT JOIN log_snapshot_nodes s
       ON g.since IS NULL AND {snap_s} AND s.namespace = a.namespace
      AND s.id = a.node_id
WHERE a.ns_created IS NULL AND a.ns_dropped IS NULL {owned}
  -- nodes of an earlier generation of the namespace are gone with it, whatever they did
  AND a.last_pos > coalesce(g.since, -1)
  AND (a.unknown > 0 OR a.c_count > 1 OR a.last_pos > a.d_pos
       OR (a.first_change IS NOT NULL AND s.id IS NULL
           AND (a.c_pos IS NULL OR a.first_change < a.c_pos)))
LIMIT 100
"""


class FoldedNamespace:
    """One namespace of a ``SetFold``: its live nodes with paths, streamed from PostgreSQL."""

    def __init__(self, fold: SetFold, namespace: str) -> None:
        self.fold = fold
        self.namespace = namespace

    def __len__(self) -> int:
        return self.fold.counts.get(self.namespace, 0)

    def nodes(self) -> Iterator[Node]:
        """Every live node, root included, with its path (in no promised order)."""
        return self.fold._stream(self.namespace, order_by_id=False)

    def nodes_by_id(self) -> Iterator[Node]:
        """The same, sorted by id (uuid order = the order of their lowercase text)."""
        return self.fold._stream(self.namespace, order_by_id=True)


def _part_hash(column: str) -> str:
    """SQL: the non-negative hash of a node id that splits folds into parts (a row without
    a node id hashes to 0)."""
    return f"(coalesce(uuid_hash({column}), 0) & 2147483647)"


@dataclass(frozen=True)
class FoldPart:
    """Part ``index`` (from 0) of a fold split into ``of`` parts by node id."""

    index: int
    of: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.of:
            raise ValueError(f"no part {self.index} of {self.of}")

    def owns(self, column: str) -> str:
        """SQL: the node id in ``column`` is one of this part's."""
        return f"{_part_hash(column)} % {self.of} = {self.index}"

    def events(self) -> str:
        """SQL filter of ``events`` rows: this part's nodes, every directory's tree
        events, the namespaces' events (see the module's docstring)."""
        return (f"AND ({self.owns('node_id')} "
                "OR type IN (:t_namespace_created, :t_namespace_dropped) "
                "OR (type IN (:t_created, :t_moved, :t_deleted) "
                "AND payload ->> 'kind' = 'dir'))")


class SetFold:
    """The log folded as of ``position`` into a temporary table of a dedicated session.

    Its readers use ``namespaces()``, ``trees[ns].nodes()`` / ``.nodes_by_id()``,
    ``entries()`` (replay's documents), ``anomalies``, ``events``, ``position``,
    ``node_count()`` and ``close()``. The temporary tables go with the session, also when
    the process is killed.
    """

    def __init__(self, conn: Connection, position: int, base: FoldStart, owns_conn: bool,
                 part: FoldPart | None = None) -> None:
        self.conn = conn
        #: Only this part's nodes are returned (``FoldPart``); None: every node.
        self.part = part
        self.position = position
        self.base = base
        self.owns_conn = owns_conn
        self.anomalies = Anomalies()
        self.events = 0
        self.counts: dict[str, int] = {}
        self.trees: dict[str, FoldedNamespace] = {}
        n = next(_names)
        self.tables = {k: f"pathkeeper_sf_{k}_{n}" for k in ("agg", "gen", "state", "nodes")}
        #: Namespaces folded from a snapshot of their own (``moved_in``), by name.
        self.own_bases: dict[str, FoldStart] = {}
        self._sorted = False

    # ---------------------------------------------------------------- reading

    def namespaces(self) -> list[str]:
        return sorted(self.trees)

    def node_count(self) -> int:
        """Live nodes, roots included."""
        return sum(self.counts.values())

    def _stream(self, namespace: str, order_by_id: bool) -> Iterator[Node]:
        conn = self.conn
        if order_by_id and not self._sorted:
            # One index, built when first asked for: replay never needs it.
            conn.execute(text(
                f"CREATE INDEX ON {self.tables['nodes']} (namespace, id)"
            ))
            conn.commit()
            self._sorted = True
        sql = (
            "SELECT id, parent_id, name, kind, content, metadata, version, path "
            f"FROM {self.tables['nodes']} WHERE namespace = :ns {self._owned('id')}"
            + (" ORDER BY id" if order_by_id else "")
        )
        # The caller may idle between fetches (loading Elasticsearch): not a hung client.
        conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
        try:
            for r in streamed(conn, text(sql), {"ns": namespace}, STREAM_CHUNK):
                yield node_of(namespace, r, r.path)
        finally:
            conn.rollback()  # read only: nothing to keep, and no snapshot held after

    def entries(self, index: str, seq: int) -> Iterator[tuple[str, str, bytes]]:
        """Every indexed node (roots left out), of every namespace, as (namespace, id,
        its ``_bulk`` index entry into ``index`` at external version ``seq``), rendered
        by PostgreSQL from the folded rows (``contract.index_entry_sql``): one streamed
        statement, no ``Node`` per row (replay's load)."""
        conn = self.conn
        sql = (
            "SELECT f.namespace, CAST(f.id AS text) AS id, "
            + index_entry_sql("CAST(:index AS text)", "f", "f.path", "CAST(:seq AS bigint)",
                              "f.namespace")
            # A node without metadata reads as {} (``node_of``), not as null.
            + " AS entry FROM (SELECT namespace, id, parent_id, name, kind, content, "
            "COALESCE(metadata, CAST('{}' AS jsonb)) AS metadata, path "
            f"FROM {self.tables['nodes']} WHERE parent_id IS NOT NULL {self._owned('id')}) f"
        )
        conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
        try:
            for row in streamed(conn, text(sql), {"index": index, "seq": seq}, STREAM_CHUNK):
                yield row.namespace, row.id, row.entry.encode()
        finally:
            conn.rollback()

    def _owned(self, column: str) -> str:
        """SQL: ``AND`` the node id in ``column`` is returned by this fold."""
        return "" if self.part is None else f"AND {self.part.owns(column)}"

    # ------------------------------------------------------------------ life

    def close(self) -> None:
        conn = self.conn
        try:
            if not conn.closed:
                conn.rollback()
                for name in self.tables.values():
                    conn.execute(text(f"DROP TABLE IF EXISTS {name}"))
                conn.commit()
        finally:
            if self.owns_conn:
                conn.close()

    def __enter__(self) -> SetFold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ns_filter(namespaces: Sequence[str] | None, column: str = "namespace") -> str:
    return "" if namespaces is None else f"AND {column} = ANY(:nss)"


def fold_into(
    conn: Connection,
    *,
    until: int,
    namespaces: Sequence[str] | None = None,
    use_snapshots: bool = True,
    owns_conn: bool = False,
    part: FoldPart | None = None,
) -> SetFold:
    """Fold the log as of ``until`` (a safe position, or the caller's snapshot defines
    what exists) on ``conn``, in the transaction the caller began or in a new one.

    The caller decides the isolation: ``fold`` runs it REPEATABLE READ, so that the
    snapshot tables, the horizon and the events are read as one consistent cut even if a
    compaction commits meanwhile; ``verify_log`` runs it inside its own snapshot, beside
    its read of ``nodes``. Returns with the transaction still open (the caller commits).
    """
    base = pick_base(conn, until, use_snapshots)
    fold = SetFold(conn, until, base, owns_conn, part)
    own = fold.own_bases = moved_in(conn, base, until, namespaces)
    t = fold.tables
    params: dict[str, Any] = {
        "after": min([base.position, *(b.position for b in own.values())]),
        "base_after": base.position, "until": until, "sid": base.snapshot_id,
        "nss": list(namespaces or ()), "own_nss": list(own),
        "own_sids": [b.snapshot_id for b in own.values()],
        "own_pos": [b.position for b in own.values()], **EVENT_PARAMS,
    }
    # Namespaces moved here or away (docs/sharding.md): only with fence rows, so a server
    # that never took part in a move folds with exactly the statements it always did.
    placed = bool(conn.execute(text("SELECT EXISTS (SELECT FROM namespace_placement)"))
                  .scalar_one())
    events_filter = _ns_filter(namespaces)
    if placed:
        events_filter += " AND " + OWNED_EVENT_SQL.format(e="events")
    if own:
        events_filter += " " + _OWN_START
    if part is not None:
        events_filter += " " + part.events()
    owned = "AND " + OWNED_NAMESPACE_SQL.format(ns="n.namespace") if placed else ""
    snap = _snapshot_rows("n.", bool(own))
    if not re.fullmatch(r"\d+\s*(kB|MB|GB)?", WORK_MEM):
        raise ValueError(f"PATHKEEPER_FOLD_WORK_MEM: not a memory size: {WORK_MEM!r}")
    if PARALLEL < 1:
        raise ValueError(f"PATHKEEPER_FOLD_PARALLEL: not a number of processes: {PARALLEL}")
    conn.execute(text(f"SET LOCAL work_mem = '{WORK_MEM}'"))
    # JIT compiles these plans for seconds and gains nothing on them (measured).
    conn.execute(text("SET LOCAL jit = off"))
    for name in t.values():
        conn.execute(text(f"DROP TABLE IF EXISTS {name}"))
    # Hashing, even spilled past work_mem, and not the planner's other choice at a million
    # nodes: an external sort of every event row, payload included (1.5 GB of temporary
    # files for 5,000,000 events; 42-57 s against 29-37 s for the hash, measured).
    conn.execute(text("SET LOCAL enable_sort = off"))
    # One worker a part (the leader takes one, so one is spare: with fewer, the planner
    # counts the leader as mostly busy gathering and keeps the parts in one process).
    conn.execute(text(
        f"SET LOCAL max_parallel_workers_per_gather = {PARALLEL if PARALLEL > 1 else 0}"))
    saved = {name: conn.execute(text("SELECT current_setting(:n)"), {"n": name}).scalar_one()
             for name in AGG_SETTINGS}
    for name, value in AGG_SETTINGS.items():
        conn.execute(text(f"SET LOCAL {name} = {value}"))
    conn.execute(text(agg_sql(t["agg"], events_filter, PARALLEL,
                              1 if part is None else part.of)), params)
    conn.execute(text("SET LOCAL enable_sort = on"))
    # The later statements read the fold's temporary tables, which workers cannot; and a
    # caller's statements after the fold in this transaction (verify) stay as they were.
    conn.execute(text("SET LOCAL max_parallel_workers_per_gather = 0"))
    for name, value in saved.items():
        conn.execute(text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value})
    # Only the columns later plans join or filter on: statistics of the wide array
    # columns (element frequencies) cost more than the rest of ANALYZE.
    conn.execute(text(f"ANALYZE {t['agg']} (namespace, node_id, ns_created, c_pos, d_pos)"))
    conn.execute(text(GEN_SQL.format(**t, ns_filter=_ns_filter(namespaces, "n.namespace"),
                                     snap=snap, owned=owned)), params)
    snap_part = "" if part is None else f"AND (n.kind = 'dir' OR {part.owns('n.id')})"
    conn.execute(text(STATE_SQL.format(**t, snap=snap, snap_part=snap_part)), params)
    conn.execute(text(f"ANALYZE {t['state']} (namespace, id, parent_id)"))
    conn.execute(text(STATE_PATHS_SQL.format(**t, shallow=SHALLOW)), params)
    deeper = conn.execute(text(
        f"SELECT EXISTS (SELECT FROM {t['nodes']} WHERE depth = {SHALLOW})"
    )).scalar_one()
    if deeper:
        conn.execute(text(f"CREATE INDEX ON {t['state']} (namespace, parent_id)"))
        conn.execute(text(f"ANALYZE {t['state']}"))
        conn.execute(text(DEEP_STATE_PATHS_SQL.format(**t, shallow=SHALLOW)), params)
    fold.events = int(
        conn.execute(text(f"SELECT coalesce(sum(n), 0) FROM {t['agg']} "
                          f"WHERE true {fold._owned('node_id')}")).scalar_one()
    )
    for ns, count in conn.execute(text(
        f"SELECT namespace, count(*) FROM {t['nodes']} WHERE true {fold._owned('id')} "
        "GROUP BY namespace"
    )):
        fold.counts[str(ns)] = int(count)
    for (ns,) in conn.execute(text(f"SELECT namespace FROM {t['gen']}")):
        fold.trees[str(ns)] = FoldedNamespace(fold, str(ns))
        fold.counts.setdefault(str(ns), 0)
    _anomalies(conn, fold, params)
    return fold


def _anomalies(conn: Connection, fold: SetFold, params: dict[str, Any]) -> None:
    t = fold.tables
    snap_s = _snapshot_rows("s.", bool(fold.own_bases))
    owned = fold._owned("a.node_id")
    for r in conn.execute(text(ANOMALY_SQL.format(**t, snap_s=snap_s, owned=owned)), params):
        where = f"namespace {r.namespace} node {r.node_id}"
        if r.unknown:
            fold.anomalies.add(f"{where}: {r.unknown} events of unknown type or version")
        if r.c_count > 1:
            fold.anomalies.add(f"{where}: created {r.c_count} times")
        if r.d_pos is not None and r.last_pos > r.d_pos:
            fold.anomalies.add(f"{where}: events after its deletion at {r.d_pos}")
        if r.first_change is not None and not r.in_snapshot and (
            r.c_pos is None or r.first_change < r.c_pos
        ):
            fold.anomalies.add(f"{where}: changed at {r.first_change} before it existed")
    # Unreachable nodes that no delete explains are not told apart from nodes deleted
    # with their directory here: verify's comparison with ``nodes`` shows them.
    # Events in namespaces that do not exist:
    for r in conn.execute(text(
        f"SELECT a.namespace, min(a.node_id::text) AS node, count(*) AS n FROM {t['agg']} a "
        f"WHERE true {owned} AND NOT EXISTS (SELECT FROM {t['agg']} b "
        "WHERE b.namespace = a.namespace AND b.ns_created IS NOT NULL) "
        f"AND NOT EXISTS (SELECT FROM log_snapshot_nodes s WHERE {snap_s} "
        "AND s.namespace = a.namespace AND s.parent_id IS NULL) "
        "GROUP BY a.namespace LIMIT 100"
    ), params):
        fold.anomalies.add(f"events of {r.n} nodes in unknown namespace {r.namespace}")


def fold(
    engine: Engine,
    *,
    until: int,
    namespaces: Sequence[str] | None = None,
    use_snapshots: bool = True,
    part: FoldPart | None = None,
    snapshot: str | None = None,
) -> SetFold:
    """Fold the log as of ``until`` (a safe position) on a new dedicated connection;
    the caller closes the result (``with fold(...) as f:``). Only ``part``'s nodes, if
    given; in the exported ``snapshot`` (``pg_export_snapshot()`` of a transaction still
    open), if given, so that several parts read one cut."""
    if snapshot is not None and not re.fullmatch(r"[0-9A-Fa-f]+-[0-9A-Fa-f]+(-[0-9]+)?",
                                                 snapshot):
        raise ValueError(f"not an exported snapshot: {snapshot!r}")
    conn = engine.connect()
    try:
        conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        if snapshot is not None:
            conn.execute(text(f"SET TRANSACTION SNAPSHOT '{snapshot}'"))
        # A long statement on a big log: not a hung client.
        conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
        result = fold_into(conn, until=until, namespaces=namespaces,
                           use_snapshots=use_snapshots, owns_conn=True, part=part)
        conn.commit()  # the temporary tables stay; the snapshot is released
        return result
    except BaseException:
        conn.close()
        raise
