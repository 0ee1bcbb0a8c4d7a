"""A stat by node id reads its row and its ancestors through (namespace, id), whatever
the statistics of ``nodes`` say: as many buffers as with statistics up to date."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text
from tree_checks import BESIDE_NODES, freeze_statistics, nodes_reltuples

from coordinator import Coordinator
from coordinator import sql as queries
from pathkeeper.local.bulk_tree import bulk_subtree


def _buffers(conn: Connection, query: str, params: dict[str, Any]) -> int:
    """Shared buffers one run of ``query`` touched."""
    plan = conn.execute(text("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query),
                        params).scalar_one()[0]["Plan"]
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


def test_a_stat_by_id_reads_as_analyzed_with_stale_statistics(
    coord: Coordinator, ns: str
) -> None:
    """Statistics from when the namespace was small beside a large one (before
    autovacuum's next analyze, after a burst of creates): the planner guessed one row
    for the namespace and scanned it at each level by (namespace, parent_id, name),
    filtering on the id: 19 ms for a stat by id in a namespace of 20,000 nodes, 0.35 ms
    analyzed; 8,465 buffers against 15 for 2,000 nodes."""
    freeze_statistics(coord, beside=True)  # the namespace's root beside 1,000 nodes
    bulk_subtree(coord, ns, "/", "t", dirs=20, files_per_dir=100)  # a burst of creates
    f = coord.stat(ns, "/t/d7/f77")
    assert 0 <= nodes_reltuples(coord) < BESIDE_NODES + 10
    stat = queries.load("q_stat_by_id")
    with coord.engine.connect() as conn:
        stale = _buffers(conn, stat, {"ns": ns, "id": f.id})
        conn.execute(text("ANALYZE nodes"))
        analyzed = _buffers(conn, stat, {"ns": ns, "id": f.id})
    assert stale <= analyzed + 5, (stale, analyzed)
    assert coord.stat(ns, f.id).path == "/t/d7/f77"
