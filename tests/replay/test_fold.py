"""The fold of the event log reproduces the nodes table (both backends), and
``verify_log`` notices a log that does not."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from coordinator import Coordinator
from indexer.fold import Folder, MemoryTree, SpilledTree
from indexer.replay import current_bound, scan_events
from indexer.verify import verify_log

from .replay_workload import concurrent_ops, random_ops


def table(coord: Coordinator, ns: str) -> dict[str, dict[str, Any]]:
    return {
        n.id: {"parent_id": n.parent_id, "name": n.name, "kind": n.kind, "path": n.path,
               "content": n.content, "metadata": n.metadata, "version": n.version}
        for n in coord.walk(ns)
    }


def folded(folder: Folder, ns: str) -> dict[str, dict[str, Any]]:
    return {
        n.id: {"parent_id": n.parent_id, "name": n.name, "kind": n.kind, "path": n.path,
               "content": n.content, "metadata": n.metadata, "version": n.version}
        for n in folder.trees[ns].nodes_by_id()
    }


def test_fold_of_the_log_equals_the_nodes_table_in_memory_and_spilled(
    coord: Coordinator,
) -> None:
    for ns in ("a", "b", "gone"):
        coord.create_namespace(ns)
    random_ops(coord, "a", 150, seed=1)
    random_ops(coord, "b", 80, seed=2)
    random_ops(coord, "gone", 20, seed=3)
    coord.drop_namespace("gone", force=True)
    coord.create_namespace("gone")  # re-created: a new root, an empty tree
    expected = {ns: table(coord, ns) for ns in ("a", "b", "gone")}
    assert len(expected["a"]) > 20  # the workload really built a tree
    bound = current_bound(coord.engine)
    # In memory; spilled by the per-namespace threshold; spilled by the total budget.
    for threshold, budget, backend in (
        (10**9, 10**9, MemoryTree), (10, None, SpilledTree), (10**9, 30, SpilledTree)
    ):
        with coord.engine.connect() as conn, Folder(
            coord.engine, threshold, memory_budget=budget
        ) as folder:
            folder.BUDGET_CHECK = 1
            folder.fold(scan_events(conn, until=bound))
            assert folder.anomalies.count == 0, folder.anomalies.first
            assert folder.namespaces() == ["a", "b", "gone"]
            assert isinstance(folder.trees["a"], backend)
            for ns in ("a", "b", "gone"):
                assert folded(folder, ns) == expected[ns]
                ids = [n.id for n in folder.trees[ns].nodes_by_id()]
                assert ids == sorted(ids)
                assert sorted(n.id for n in folder.trees[ns].nodes()) == ids


def test_verify_log_after_a_concurrent_workload(coord: Coordinator) -> None:
    for ns in ("x", "y"):
        coord.create_namespace(ns)
    assert concurrent_ops(coord, ["x", "y"], clients=4, ops_each=60, seed=7) > 100
    for threshold in (10**9, 15):
        report = verify_log(coord, spill_threshold=threshold)
        assert report.ok, (report.drift[:5], report.anomalies[:5])
        assert report.nodes == sum(len(table(coord, ns)) for ns in ("x", "y"))


def test_verify_log_reports_a_corrupt_log(coord: Coordinator, ns: str) -> None:
    coord.mkdir(ns, "/d")
    f = coord.create_file(ns, "/d/f", "one")
    g = coord.create_file(ns, "/d/g", "two")
    coord.write_file(ns, "/d/f", "three")
    assert verify_log(coord).ok
    with coord.engine.begin() as conn:
        # A lost event: g's creation. A tampered one: f's last content.
        conn.execute(text("DELETE FROM events WHERE position = :p"), {"p": g.seq})
        conn.execute(
            text("UPDATE events SET payload = jsonb_set(payload, '{content}', '\"bad\"') "
                 "WHERE type = 'written' AND node_id = :id"),
            {"id": f.node.id},
        )
    report = verify_log(coord)
    assert not report.ok
    found = {(d.kind, d.node_id, d.fields) for d in report.drift}
    assert found == {("missing", g.node.id, ()), ("differs", f.node.id, ("content",))}
