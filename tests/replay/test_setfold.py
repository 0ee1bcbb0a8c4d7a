"""The set fold (``indexer.setfold``, replay's and verify's) equals this suite's own
sequential fold of the wire events (``reliability.fold_check``) on random histories, at
every position a reader can stop at, from the start of the log and from a stored
snapshot; and on concurrent histories of the real coordinator."""

from __future__ import annotations

import dataclasses
import itertools
import os
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability.fold_check import Fold
from sqlalchemy import Engine, text

from coordinator import Coordinator, Event
from coordinator.events import VERSION_KEY, Written
from coordinator.results import POSITION_BLOCK
from indexer import setfold
from indexer.log_scan import current_bound, scan_events
from indexer.retention import compact, take_snapshot

from .histories import History, build, insert
from .replay_workload import concurrent_ops

EXAMPLES = 200 if os.environ.get("PATHKEEPER_LONG", "") not in ("", "0") else 30
_examples = itertools.count()

Rows = dict[str, dict[str, tuple[Any, ...]]]


def rows_of(fold: Any) -> Rows:
    """Every namespace's live nodes, by id: everything a document is made of."""
    return {
        ns: {n.id: (n.parent_id, n.name, n.kind, n.content, n.metadata, n.version, n.path)
             for n in fold.trees[ns].nodes_by_id()}
        for ns in fold.namespaces()
    }


def reference(events: list[Event], until: int, namespaces: list[str]) -> Rows:
    fold = Fold(strict_paths=False)  # concurrent histories may carry stale payload paths
    fold.apply_all([e for e in events if e.position <= until and e.namespace in namespaces])
    return {
        ns: {i: (n.parent_id, n.name, n.kind, n.content, n.metadata, n.version,
                 tree.path_of(i)) for i, n in tree.nodes.items()}
        for ns, tree in fold.trees.items()
    }


def set_fold(engine: Engine, until: int, namespaces: list[str], snapshots: bool) -> Rows:
    with setfold.fold(engine, until=until, namespaces=namespaces,
                      use_snapshots=snapshots) as f:
        assert f.anomalies.count == 0, f.anomalies.first
        return rows_of(f)


@pytest.fixture(params=["one process", "parts in parallel workers", "no worker free"])
def plan(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How the aggregate runs: in the leader alone, or split by node into parts that
    parallel workers aggregate (forced here: these logs are too small for the planner to
    start workers by itself), or that parallel plan when the server has no worker free
    (the leader runs every part). The default, parts one after the other in the leader
    below that size, is what the other tests run."""
    if request.param == "one process":
        monkeypatch.setattr(setfold, "PARALLEL", 1)
    else:
        monkeypatch.setattr(setfold, "PARALLEL", 2)
        monkeypatch.setattr(setfold, "AGG_SETTINGS", {
            **setfold.AGG_SETTINGS, "parallel_setup_cost": "0", "parallel_tuple_cost": "0",
            **({"max_parallel_workers": "0"} if request.param == "no worker free" else {})})
    return str(request.param)


def next_block(engine: Engine) -> int:
    with engine.connect() as conn:
        last = conn.execute(text("SELECT last_value FROM event_position_seq")).scalar_one()
    return int(last) // POSITION_BLOCK + 1


step = st.tuples(st.integers(0, 6), st.integers(0, 50), st.integers(0, 50),
                 st.integers(0, 50))


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(steps=st.lists(step, min_size=1, max_size=60), picks=st.data())
def test_set_fold_equals_the_sequential_fold_on_random_histories(
    coord: Coordinator, plan: str, steps: list[tuple[int, int, int, int]],
    picks: st.DataObject
) -> None:
    # One database for every example: each example has namespaces of its own and
    # positions above the ones before (a snapshot covers all of them, which is fine).
    engine = coord.engine
    k = next(_examples)
    nss = [f"h{k}a", f"h{k}b"]
    hist = build(steps, nss, next_block(engine))
    insert(engine, hist)
    end = hist.ends[-1]
    mid = picks.draw(st.sampled_from(hist.ends), label="until")
    for until in sorted({mid, end}):
        expected = reference(hist.events, until, nss)
        assert set_fold(engine, until, nss, snapshots=False) == expected
    # From a snapshot plus the tail: the same state, as of any position above it.
    at = picks.draw(st.sampled_from(hist.ends), label="snapshot at")
    snap = take_snapshot(engine, at, wait=10)
    assert snap.position == at
    for until in sorted({at, mid, end}):
        expected = reference(hist.events, until, nss)
        with setfold.fold(engine, until=until, namespaces=nss) as f:
            assert (f.base.snapshot_id == snap.id) == (until >= at)
            assert rows_of(f) == expected
    if picks.draw(st.booleans(), label="compact"):
        # Compaction keeps every state at or above the snapshot, refuses the ones below.
        done = compact(engine, timedelta(0), force=True)
        assert done.horizon == at
        assert set_fold(engine, end, nss, snapshots=True) == reference(hist.events, end, nss)
        if hist.ends[0] < at:
            with pytest.raises(setfold.LogCompacted):
                set_fold(engine, hist.ends[0], nss, snapshots=True)


def parts_fold(engine: Engine, until: int, namespaces: list[str], parts: int,
               snapshots: bool) -> Rows:
    """The fold in ``parts`` parts by node id (replay's pipelined fold), all in one
    exported snapshot; their union, each node in exactly one part."""
    got: Rows = {}
    with engine.connect() as anchor:
        anchor.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        snapshot = anchor.execute(text("SELECT pg_export_snapshot()")).scalar_one()
        for index in range(parts):
            with setfold.fold(engine, until=until, namespaces=namespaces,
                              use_snapshots=snapshots, part=setfold.FoldPart(index, parts),
                              snapshot=snapshot) as f:
                assert f.anomalies.count == 0, f.anomalies.first
                for ns, rows in rows_of(f).items():
                    assert not set(rows) & set(got.get(ns, {}))  # each node in one part
                    got.setdefault(ns, {}).update(rows)
                    assert len(f.trees[ns]) == len(rows)
    return got


# Half the examples: each folds 2-5 parts four times (two cuts, with and without a snapshot).
@settings(max_examples=EXAMPLES // 2, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(steps=st.lists(step, min_size=1, max_size=60), picks=st.data())
def test_the_fold_in_parts_equals_the_sequential_fold(
    coord: Coordinator, steps: list[tuple[int, int, int, int]], picks: st.DataObject
) -> None:
    """Folded in parts by node id (every part with every directory's tree events), the
    union of the parts is the whole fold: from the start and from a snapshot. (Parts and
    the aggregate's plan are independent: the default plan only, the plans have the test
    above.)"""
    engine = coord.engine
    k = next(_examples)
    nss = [f"p{k}a", f"p{k}b"]
    hist = build(steps, nss, next_block(engine))
    insert(engine, hist)
    end = hist.ends[-1]
    parts = picks.draw(st.integers(2, 5), label="parts")
    mid = picks.draw(st.sampled_from(hist.ends), label="until")
    for until in sorted({mid, end}):
        expected = reference(hist.events, until, nss)
        assert parts_fold(engine, until, nss, parts, snapshots=False) == expected
    at = picks.draw(st.sampled_from(hist.ends), label="snapshot at")
    take_snapshot(engine, at, wait=10)
    for until in sorted({at, end}):
        expected = reference(hist.events, until, nss)
        assert parts_fold(engine, until, nss, parts, snapshots=True) == expected


def test_parts_read_one_cut(coord: Coordinator, ns: str) -> None:
    """A part folded after a write committed still folds the exported snapshot's state:
    the parts together are one cut, whatever commits between them."""
    coord.mkdir(ns, "/d")
    files = [coord.create_file(ns, f"/d/f{i}", str(i)).node.id for i in range(12)]
    until = current_bound(coord.engine)
    expected = set_fold(coord.engine, until, [ns], snapshots=False)
    with coord.engine.connect() as anchor:
        anchor.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        snapshot = anchor.execute(text("SELECT pg_export_snapshot()")).scalar_one()
        # Compaction after a snapshot at the bound deletes the events the parts fold; in
        # the exported snapshot they are still there, and the snapshot is not.
        take_snapshot(coord.engine, until, wait=10)
        compact(coord.engine, timedelta(0), force=True)
        got: Rows = {ns: {}}
        for index in range(3):
            with setfold.fold(coord.engine, until=until, namespaces=[ns],
                              part=setfold.FoldPart(index, 3), snapshot=snapshot) as f:
                assert f.base.snapshot_id is None
                got[ns].update(rows_of(f)[ns])
    assert got == expected and set(files) <= set(got[ns])


def test_set_fold_equals_the_sequential_fold_on_concurrent_histories(
    coord: Coordinator, plan: str
) -> None:
    """4 clients at once on two namespaces (moves, recursive deletes, races): at a sample
    of the transaction boundaries of the log, both folds agree; at the end, the set fold
    equals the nodes table."""
    for ns in ("x", "y"):
        coord.create_namespace(ns)
    assert concurrent_ops(coord, ["x", "y"], clients=4, ops_each=50, seed=11) > 100
    bound = current_bound(coord.engine)
    with coord.engine.connect() as conn:
        events = list(scan_events(conn, until=bound))
    ends = sorted({e.transaction_block * POSITION_BLOCK + POSITION_BLOCK - 1 for e in events})
    sample = [*ends[:: max(1, len(ends) // 12)], bound]
    for until in sample:
        expected = reference(events, until, ["x", "y"])
        assert set_fold(coord.engine, until, ["x", "y"], snapshots=False) == expected, until
    final = set_fold(coord.engine, bound, ["x", "y"], snapshots=False)
    for ns in ("x", "y"):
        table = {n.id: (n.parent_id, n.name, n.kind, n.content, n.metadata, n.version, n.path)
                 for n in coord.walk(ns)}
        assert final[ns] == table


def test_the_parts_of_the_aggregate_run_whole_in_parallel_workers(
    coord: Coordinator, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each part is one process's whole aggregate (no partial aggregates to combine),
    the parts side by side in workers; every node in exactly one part."""
    monkeypatch.setattr(setfold, "AGG_SETTINGS", {
        **setfold.AGG_SETTINGS, "parallel_setup_cost": "0", "parallel_tuple_cost": "0"})
    coord.mkdir(ns, "/a/b", parents=True)
    for i in range(40):
        coord.create_file(ns, f"/a/b/f{i}", str(i))
    params = {"after": 0, "until": current_bound(coord.engine), "sid": None, "nss": [ns],
              **setfold.EVENT_PARAMS}
    with coord.engine.connect() as conn:
        conn.execute(text("SET LOCAL max_parallel_workers_per_gather = 2"))
        for name, value in setfold.AGG_SETTINGS.items():
            conn.execute(text(f"SET LOCAL {name} = {value}"))
        sql = setfold.agg_sql("t_agg", setfold._ns_filter([ns]), 2)
        plan = "\n".join(r[0] for r in conn.execute(
            text("EXPLAIN (ANALYZE, COSTS OFF) " + sql), params))
        assert "Parallel Append" in plan and "Workers Launched: 2" in plan, plan
        assert "Partial" not in plan and "Finalize" not in plan, plan
        assert "Parallel Seq Scan" not in plan and "Parallel Index" not in plan, plan
        assert plan.count("Aggregate") == 2, plan
        n, nodes, distinct = conn.execute(text(
            "SELECT sum(n), count(*), count(DISTINCT node_id) FROM t_agg")).one()
        assert (n, nodes, distinct) == (43, 43, 43)  # the root's, /a's, /a/b's, 40 files'
        # No worker free: the same plan, the leader runs every part.
        conn.execute(text("SET LOCAL max_parallel_workers = 0"))
        sql = setfold.agg_sql("t_agg_alone", setfold._ns_filter([ns]), 2)
        plan = "\n".join(r[0] for r in conn.execute(
            text("EXPLAIN (ANALYZE, COSTS OFF) " + sql), params))
        assert "Parallel Append" in plan and "Workers Launched: 0" in plan, plan
        assert conn.execute(text(
            "SELECT count(*) FROM (SELECT * FROM t_agg EXCEPT SELECT * FROM t_agg_alone) d"
        )).scalar_one() == 0


def test_a_node_moved_out_before_its_directory_is_deleted_survives(
    coord: Coordinator, ns: str
) -> None:
    coord.mkdir(ns, "/d/e", parents=True)
    keep = coord.create_file(ns, "/d/e/keep", "k")
    coord.create_file(ns, "/d/e/gone", "g")
    coord.mkdir(ns, "/other")
    coord.move(ns, keep.node.id, "/other/keep")
    moved_in = coord.create_file(ns, "/other/late", "l")
    coord.move(ns, moved_in.node.id, "/d/e/late")
    coord.delete(ns, "/d", recursive=True)
    with setfold.fold(coord.engine, until=current_bound(coord.engine)) as f:
        paths = sorted(n.path for n in f.trees[ns].nodes())
    assert paths == ["/", "/other", "/other/keep"]


@pytest.mark.parametrize("shallow", [setfold.SHALLOW, 2])
def test_deep_trees_are_walked_past_the_shallow_levels(
    coord: Coordinator, ns: str, shallow: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``SHALLOW`` levels the walk goes on with an index: every depth is reached."""
    monkeypatch.setattr(setfold, "SHALLOW", shallow)
    deep = "/" + "/".join(f"d{i}" for i in range(40))
    coord.mkdir(ns, deep, parents=True)
    for depth in (1, 2, 3, 25, 40):
        coord.create_file(ns, "/" + "/".join(f"d{i}" for i in range(depth)) + "/f", "x")
    coord.move(ns, "/d0/d1/d2/d3", "/moved")  # a deep subtree changes depth
    coord.delete(ns, "/moved/d4/d5/d6/d7/d8/d9/d10/d11/d12/d13/d14/d15/d16/d17/d18/d19/d20/"
                 "d21/d22/d23/d24/d25/d26/d27/d28/d29/d30", recursive=True)
    with setfold.fold(coord.engine, until=current_bound(coord.engine)) as f:
        got = {n.id: (n.parent_id, n.name, n.path) for n in f.trees[ns].nodes()}
    assert got == {n.id: (n.parent_id, n.name, n.path) for n in coord.walk(ns)}
    assert max(p.count("/") for _, _, p in got.values()) == 27  # deeper than SHALLOW



def test_events_of_unknown_types_or_versions_are_anomalies(
    coord: Coordinator, ns: str
) -> None:
    """A newer writer's event is not folded as if this code knew it: the fold says so."""
    f = coord.create_file(ns, "/f", "one")
    bound = current_bound(coord.engine)
    with coord.engine.connect() as conn:
        events = [e for e in scan_events(conn, until=bound) if e.namespace == ns]
    at = bound + 1
    write = Event.of(at + 1, ns, Written(id=f.node.id, path="/f", content="two",
                                         metadata=None, version=2), events[-1].committed_at)
    newer = [
        Event(at, ns, "touched", f.node.id, {"id": f.node.id}, write.committed_at),
        dataclasses.replace(write, payload={**write.payload, VERSION_KEY: 9}),
    ]
    insert(coord.engine, History(events=newer))
    with setfold.fold(coord.engine, until=at + 1, namespaces=[ns]) as sf:
        assert sf.anomalies.first == [
            f"namespace {ns} node {f.node.id}: 2 events of unknown type or version"
        ]
