"""The worker's read of a batch's documents (``live_nodes.fetch_entries``: each id walked
up to the root, its ``_bulk`` entry rendered by PostgreSQL) costs in proportion to the
batch, whether or not ``nodes`` has statistics yet, and compiles nothing."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from coordinator import Coordinator
from indexer import live_nodes

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
    coord.import_nodes(ns, (f'{{"path": "/t/d{i // 100}/f{i}", "kind": "file"}}'
                            for i in range(FILES)))
    with coord.engine.connect() as conn:
        return [str(i) for i in conn.execute(text(
            "SELECT id FROM nodes WHERE namespace = :ns AND kind = 'file' ORDER BY id "
            "LIMIT 1000"), {"ns": ns}).scalars()]


def test_each_step_up_is_one_probe_with_stale_statistics(coord: Coordinator, ns: str) -> None:
    """Right after a namespace filled in a burst (statistics from when it was empty,
    before autovacuum's next analyze) the planner guesses one row for the namespace and
    costs a scan of (namespace, parent_id, name) by namespace, then a filter on the id,
    as cheap as the (namespace, id) index: each step up then read the whole namespace
    (0.34 s for 1,000 ids in a namespace of 1,000 nodes, against 0.03 s)."""
    with coord.engine.connect() as conn:
        conn.execute(text("ALTER TABLE nodes SET (autovacuum_enabled = false)"))
        conn.execute(text("ANALYZE nodes"))  # the namespace's root only
        conn.commit()
    ids = _files(coord, ns)
    with coord.engine.connect() as conn:
        reltuples = conn.execute(text(
            "SELECT reltuples FROM pg_class WHERE relname = 'nodes'")).scalar_one()
        assert 0 <= reltuples < 10  # the statistics of the empty namespace
        plan = _explained(conn, ns, ids)["Plan"]
    union = next(n for n in _plan_nodes(plan) if n["Node Type"] == "Recursive Union")
    probes = [n for n in _plan_nodes(union["Plans"][1]) if n.get("Relation Name") == "nodes"]
    assert len(probes) == 1, probes
    probe = probes[0]
    assert probe["Actual Loops"] >= 3 * len(ids)  # a file, its directory, /t, the root
    per_probe = probe["Shared Hit Blocks"] / probe["Actual Loops"]
    assert per_probe <= 5, (per_probe, probe.get("Index Name"), probe.get("Filter"))
    assert probe["Actual Rows"] == 1


def test_the_read_compiles_nothing(coord: Coordinator, ns: str) -> None:
    """With statistics, the planner guesses tens of thousands of rows for the walk of
    1,000 ids: past jit_above_cost, PostgreSQL compiled the read for 20-25 ms, longer
    than the read itself. The coordinator's and the worker's sessions run without JIT."""
    ids = _files(coord, ns)
    with coord.engine.connect() as conn:
        conn.execute(text("ANALYZE nodes"))
        explained = _explained(conn, ns, ids)
    assert explained["Plan"]["Total Cost"] > 100_000  # jit_above_cost's default
    assert "JIT" not in explained, explained.get("JIT")
    assert explained["Plan"]["Actual Rows"] == len(ids)
