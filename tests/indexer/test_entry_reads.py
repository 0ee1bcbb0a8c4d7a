"""The worker's reads of documents from PostgreSQL (``indexer.live_nodes``: a batch's
nodes walked up to the root, a subtree walked down, each ``_bulk`` entry rendered by
the server) cost in proportion to what they read, whether or not ``nodes`` has
statistics yet, and compile nothing."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text
from tree_checks import BESIDE_NODES, freeze_statistics, nodes_reltuples

from coordinator import Coordinator
from indexer import live_nodes
from pathkeeper.local.bulk_tree import bulk_subtree

FILES = 2_000


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan] + [n for child in plan.get("Plans", []) for n in _plan_nodes(child)]


def _explained(conn: Connection, ns: str, ids: list[str]) -> dict[str, Any]:
    """The entries read of ``ids``, run under EXPLAIN ANALYZE: its plan as JSON."""
    row = conn.execute(
        text("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + live_nodes._ENTRIES_OF_IDS.text),
        {"ns": ns, "ids": ids, "index": "docs", "seq": 1},
    ).scalar_one()
    plan: dict[str, Any] = row[0]
    return plan


def _files(coord: Coordinator, ns: str) -> list[str]:
    """``FILES`` files in directories of 100 under /t, written in one transaction as a
    burst of creates is (an import would analyze the table after it); 1,000 of their
    ids."""
    bulk_subtree(coord, ns, "/", "t", dirs=FILES // 100, files_per_dir=100)
    with coord.engine.connect() as conn:
        return [str(i) for i in conn.execute(text(
            "SELECT id FROM nodes WHERE namespace = :ns AND kind = 'file' ORDER BY id "
            "LIMIT 1000"), {"ns": ns}).scalars()]


def test_each_read_of_a_node_is_one_probe_with_stale_statistics(coord: Coordinator,
                                                               ns: str) -> None:
    """Right after a namespace filled in a burst (statistics from when it was empty beside
    a large one, before autovacuum's next analyze) the planner guesses one row for the
    namespace and
    costs a scan of (namespace, parent_id, name) by namespace, then a filter on the id,
    as cheap as the (namespace, id) index: each step up then read the whole namespace
    (0.34 s for 1,000 ids in a namespace of 1,000 nodes, against 0.03 s), and so did the
    read of the named nodes, testing each row against all the ids (0.5 s for 1,000 ids
    in a namespace of 20,000 nodes)."""
    freeze_statistics(coord, beside=True)  # the namespace's root beside 1,000 nodes
    ids = _files(coord, ns)
    assert 0 <= nodes_reltuples(coord) < BESIDE_NODES + 10  # from before the burst
    with coord.engine.connect() as conn:
        plan = _explained(conn, ns, ids)["Plan"]
    probes = [n for n in _plan_nodes(plan) if n.get("Relation Name") == "nodes"]
    assert len(probes) >= 3  # the named nodes, their parents, each step up
    assert all(p["Actual Loops"] > 0 for p in probes)
    for probe in probes:
        per_probe = probe["Shared Hit Blocks"] / probe["Actual Loops"]
        assert per_probe <= 5, (per_probe, probe.get("Index Name"), probe.get("Filter"))


def test_each_directory_walks_up_once_per_read(coord: Coordinator, ns: str) -> None:
    """1,000 files of a few directories: the read walks up from their distinct parents,
    not from each file (4,000 probes and a sort of them were 30 ms of a 40 ms read)."""
    ids = _files(coord, ns)
    with coord.engine.connect() as conn:
        parents = conn.execute(text(
            "SELECT count(DISTINCT parent_id) FROM nodes WHERE namespace = :ns "
            "AND id = ANY(CAST(:ids AS uuid[]))"), {"ns": ns, "ids": ids}).scalar_one()
        explained = _explained(conn, ns, ids)
    assert parents < 25
    # Each parent: itself, /t, the root, and the root's missing parent.
    assert sum(p["Actual Loops"] for p in _probes(explained["Plan"])) <= 4 * parents
    assert explained["Plan"]["Actual Rows"] == len(ids)


def _probes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The scans of ``nodes`` of the walk up (the recursive union's two terms)."""
    union = next(n for n in _plan_nodes(plan) if n["Node Type"] == "Recursive Union")
    return [n for n in _plan_nodes(union) if n.get("Relation Name") == "nodes"]


def test_a_subtree_read_compiles_nothing(coord: Coordinator, ns: str) -> None:
    """With statistics, the planner costs the read of a directory's subtree (a rename's
    descendants) past jit_above_cost: PostgreSQL compiled it, for 340 ms of a 600 ms
    read of 20,000 descendants when the cost passed the inlining and optimizing
    thresholds too. The coordinator's and the worker's sessions run without JIT."""
    _files(coord, ns)
    with coord.engine.connect() as conn:
        conn.execute(text("ANALYZE nodes"))
        top = conn.execute(text("SELECT id FROM nodes WHERE namespace = :ns AND name = 't'"),
                           {"ns": ns}).scalar_one()
        explained = conn.execute(
            text("EXPLAIN (ANALYZE, FORMAT JSON) " + live_nodes._SUBTREE_ENTRIES.text),
            {"ns": ns, "id": top, "path": "/t", "top_version": 1, "move_ids": [top],
             "move_pos": [1], "index": "docs"},
        ).scalar_one()[0]
    assert explained["Plan"]["Total Cost"] > 100_000  # jit_above_cost's default
    assert "JIT" not in explained, explained.get("JIT")
    assert explained["Plan"]["Actual Rows"] == FILES + FILES // 100 + 1
