"""The fold of the event log reproduces the nodes table, and ``verify_log`` notices a
log that does not."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from coordinator import Coordinator
from indexer import setfold
from indexer.log_scan import current_bound
from indexer.verify import verify_log

from .replay_workload import concurrent_ops, random_ops


def table(coord: Coordinator, ns: str) -> dict[str, dict[str, Any]]:
    return {
        n.id: {"parent_id": n.parent_id, "name": n.name, "kind": n.kind, "path": n.path,
               "content": n.content, "metadata": n.metadata, "version": n.version}
        for n in coord.walk(ns)
    }


def test_the_fold_of_the_log_equals_the_nodes_table(coord: Coordinator) -> None:
    """Replay's and verify's fold (``indexer.setfold``) of the whole log, a dropped and
    re-created namespace among them, is the nodes table, in id order."""
    for ns in ("a", "b", "gone"):
        coord.create_namespace(ns)
    random_ops(coord, "a", 150, seed=1)
    random_ops(coord, "b", 80, seed=2)
    random_ops(coord, "gone", 20, seed=3)
    coord.drop_namespace("gone", force=True)
    coord.create_namespace("gone")  # re-created: a new root, an empty tree
    expected = {ns: table(coord, ns) for ns in ("a", "b", "gone")}
    assert len(expected["a"]) > 20  # the workload really built a tree
    with setfold.fold(coord.engine, until=current_bound(coord.engine),
                      use_snapshots=False) as folder:
        assert folder.anomalies.count == 0, folder.anomalies.first
        assert folder.namespaces() == ["a", "b", "gone"]
        for ns in ("a", "b", "gone"):
            got = {n.id: {"parent_id": n.parent_id, "name": n.name, "kind": n.kind,
                          "path": n.path, "content": n.content, "metadata": n.metadata,
                          "version": n.version}
                   for n in folder.trees[ns].nodes_by_id()}
            assert got == expected[ns]
            ids = list(got)
            assert ids == sorted(ids)


def test_verify_log_after_a_concurrent_workload(coord: Coordinator) -> None:
    for ns in ("x", "y"):
        coord.create_namespace(ns)
    assert concurrent_ops(coord, ["x", "y"], clients=4, ops_each=60, seed=7) > 100
    report = verify_log(coord)
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
