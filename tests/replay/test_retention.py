"""Snapshots and compaction: a replay from a snapshot plus the tail equals a replay of
the whole log; what compaction gives up fails loudly (cursors, ``--until``), never with
silently wrong data; retention and consumers' checkpoints bound what is deleted."""

from __future__ import annotations

import warnings
from datetime import timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from coordinator import Coordinator, CursorExpired
from coordinator.api_keys import create_key
from indexer import setfold
from indexer.errors import ReplayError
from indexer.log_scan import current_bound
from indexer.replay import rebuild
from indexer.retention import compact, list_snapshots, take_snapshot
from indexer.search_engine import SearchEngine
from indexer.verify import verify_log
from pathkeeper.cli.main import main
from pathkeeper.http.app import create_app
from pathkeeper.http.settings import ServiceSettings

from .conftest import diff_summary, expected_index, index_docs
from .replay_workload import random_ops
from .test_setfold import rows_of

with warnings.catch_warnings():
    # As in tests/http/conftest.py: Starlette asks for its httpx fork; httpx works the same.
    warnings.filterwarnings("ignore", message=".*httpx2", category=UserWarning)
    from fastapi.testclient import TestClient


def states(coord: Coordinator, until: int) -> tuple[object, object, int | None]:
    """The state as of ``until`` folded from the whole log and from the newest snapshot."""
    with setfold.fold(coord.engine, until=until, use_snapshots=False) as whole, \
            setfold.fold(coord.engine, until=until) as snap:
        return rows_of(whole), rows_of(snap), snap.base.snapshot_id


def test_replay_from_a_snapshot_plus_the_tail_equals_a_replay_of_the_whole_log(
    coord: Coordinator, es: SearchEngine, alias: str
) -> None:
    for ns in ("s", "t"):
        coord.create_namespace(ns)
    random_ops(coord, "s", 80, seed=21)
    random_ops(coord, "t", 30, seed=22)
    first = take_snapshot(coord.engine)
    random_ops(coord, "s", 60, seed=23)  # the tail: moves, deletes, writes after it
    coord.drop_namespace("t", force=True)
    coord.create_namespace("u")
    random_ops(coord, "u", 20, seed=24)
    second = take_snapshot(coord.engine)  # itself folded from the first plus its tail
    assert second.base_snapshot == first.id
    random_ops(coord, "s", 30, seed=25)
    end = current_bound(coord.engine)
    for until in (first.position, second.position, end):
        whole, from_snapshot, base = states(coord, until)
        assert from_snapshot == whole
        assert base == (first.id if until < second.position else second.id)
    # End to end: the rebuilt index is the nodes table, and verify's log check passes
    # from the snapshot too.
    result = rebuild(coord, es, source="events", alias=alias)
    assert result.swapped
    got, want = index_docs(es, alias), expected_index(coord)
    assert got == want, diff_summary(got, want)
    report = verify_log(coord)
    assert report.ok, (report.drift[:5], report.anomalies[:5])


def test_compaction_keeps_every_state_from_the_horizon_on_and_refuses_older_ones(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str
) -> None:
    coord.create_namespace("c")
    random_ops(coord, "c", 60, seed=31)
    early = current_bound(coord.engine)
    random_ops(coord, "c", 30, seed=32)
    snap = take_snapshot(coord.engine)
    random_ops(coord, "c", 30, seed=33)
    end = current_bound(coord.engine)
    before = states(coord, end)[0]
    with coord.engine.connect() as conn:
        total = conn.execute(text("SELECT count(*) FROM events")).scalar_one()

    # Retention: a snapshot younger than the retention window is not compacted up to.
    assert compact(coord.engine, timedelta(hours=1)).snapshot_id is None
    # No consumer checkpoint here: compaction needs --force (test_behind_horizon.py).
    done = compact(coord.engine, timedelta(0), force=True)
    assert (done.horizon, done.snapshot_id) == (snap.position, snap.id)
    with coord.engine.connect() as conn:
        left = conn.execute(text("SELECT count(*) FROM events")).scalar_one()
        assert conn.execute(text("SELECT min(position) FROM events")).scalar_one() > snap.position
    assert done.events_deleted == total - left > 0

    # Every state from the horizon on is still there, equal to what it was.
    with setfold.fold(coord.engine, until=end) as f:
        assert rows_of(f) == before
    assert verify_log(coord).ok
    result = rebuild(coord, es, source="events", alias=alias)
    got, want = index_docs(es, alias), expected_index(coord)
    assert got == want, diff_summary(got, want)

    # Below it: typed errors, one-line CLI messages.
    with pytest.raises(setfold.LogCompacted):
        setfold.fold(coord.engine, until=early)
    with pytest.raises(ReplayError, match="compacted up to position"):
        rebuild(coord, es, source="events", alias=alias, until=early)
    res = CliRunner().invoke(main, ["replay", "--database-url", database_url, "--es-url",
                                    es_url, "--alias", alias, "--until", str(early),
                                    "-q"])
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1].startswith(
        f"error: the event log was compacted up to position {snap.position}"), res.output
    with pytest.raises(CursorExpired) as info:
        coord.read_events(after=None)
    assert info.value.horizon == snap.position
    with pytest.raises(CursorExpired):
        coord.read_events(after=early)
    events, _ = coord.read_events(after=snap.position, limit=10_000)
    assert events and all(e.position > snap.position for e in events)
    assert result.position >= end

    # The change feed over HTTP: 410 with a code, never a page with a hole.
    key = create_key(coord.engine, ["c"], "read")[1]
    settings = ServiceSettings(database_url=database_url, auth_cache_seconds=0.0)
    with TestClient(create_app(settings), raise_server_exceptions=False) as http:
        r = http.get("/v1/namespaces/c/events", params={"after": str(early), "wait": 0},
                     headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 410, r.text
        assert r.json()["error"]["code"] == "cursor_expired"
        r = http.get("/v1/namespaces/c/events", params={"after": str(snap.position),
                                                         "wait": 0},
                     headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text


def test_compaction_never_passes_a_consumer_checkpoint_unless_forced(
    coord: Coordinator,
) -> None:
    coord.create_namespace("k")
    random_ops(coord, "k", 20, seed=41)
    behind = current_bound(coord.engine)
    random_ops(coord, "k", 20, seed=42)
    snap = take_snapshot(coord.engine)
    with coord.engine.begin() as conn:
        conn.execute(text("INSERT INTO checkpoints (consumer, partition, position) "
                          "VALUES ('slow-indexer', 0, :p)"), {"p": behind})
    kept = compact(coord.engine, timedelta(0))
    assert kept.snapshot_id is None and "checkpoint" in kept.reason
    coord.read_events(after=behind)  # the slow consumer can still read on
    forced = compact(coord.engine, timedelta(0), force=True)
    assert forced.horizon == snap.position
    with pytest.raises(CursorExpired):
        coord.read_events(after=behind)


def test_snapshot_and_compact_commands(coord: Coordinator, database_url: str) -> None:
    coord.create_namespace("m")
    random_ops(coord, "m", 30, seed=51)
    runner = CliRunner()
    res = runner.invoke(main, ["snapshot", "take", "--database-url", database_url])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("snapshot ") and " nodes, from " in res.output
    res = runner.invoke(main, ["snapshot", "list", "--database-url", database_url])
    assert res.exit_code == 0 and "horizon: 0 (the log is whole)" in res.output, res.output
    res = runner.invoke(main, ["compact", "--database-url", database_url, "--retain", "1d"])
    assert res.exit_code == 0 and "nothing to compact" in res.output, res.output
    res = runner.invoke(main, ["compact", "--database-url", database_url, "--retain", "0"])
    assert res.exit_code == 0 and "no consumer has a checkpoint" in res.output, res.output
    res = runner.invoke(main, ["compact", "--database-url", database_url, "--retain", "0",
                               "--force", "--dry-run"])
    assert res.exit_code == 0 and res.output.startswith("would delete"), res.output
    res = runner.invoke(main, ["compact", "--database-url", database_url, "--force"],
                        env={"PATHKEEPER_RETENTION": "0"})
    assert res.exit_code == 0 and res.output.startswith("deleted "), res.output
    [s] = list_snapshots(coord.engine)
    assert f"horizon: {s.position}" in runner.invoke(
        main, ["snapshot", "list", "--database-url", database_url]).output
    res = runner.invoke(main, ["compact", "--database-url", database_url, "--retain", "soon"])
    assert res.exit_code == 2, res.output
    assert res.output.startswith("error: Invalid value for '--retain'")
    assert "not a duration: 'soon'" in res.output
