"""Snapshots on a schedule by the worker (``WorkerConfig.snapshot_cron``, ``indexer run
--snapshot-cron``): the job takes a snapshot (and compacts with a retention), one worker
of several takes each, and a failing job is logged and counted while indexing goes on.

The worker tests use the six-field schedule with a seconds field (``"* * * * * *"``:
every second), which ``verify.cron_trigger`` accepts next to the standard crontab."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from itertools import pairwise

import pytest
from sqlalchemy import text

from coordinator import Coordinator
from indexer import retention
from indexer.log_scan import current_bound
from indexer.retention import (
    SNAPSHOT_FAILURES,
    SNAPSHOT_POSITION,
    current_horizon,
    list_snapshots,
    scheduled_snapshot,
    snapshot_lock,
)

from .conftest import RunningWorker
from .replay_workload import random_ops


def metric(m: object) -> float:
    value: float = m._value.get()  # type: ignore[attr-defined]  # no public getter
    return value


def wait_for(check: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_job_takes_a_snapshot_and_compacts_with_a_retention(coord: Coordinator) -> None:
    coord.create_namespace("j")
    random_ops(coord, "j", 30, seed=71)
    run = scheduled_snapshot(coord.engine)
    assert run.outcome == "taken" and run.snapshot is not None and run.compacted is None
    assert [s.id for s in list_snapshots(coord.engine)] == [run.snapshot.id]
    assert metric(SNAPSHOT_POSITION) == run.snapshot.position
    assert current_horizon(coord.engine) == 0
    random_ops(coord, "j", 10, seed=72)
    run = scheduled_snapshot(coord.engine, timedelta(0))
    assert run.outcome == "taken" and run.compacted is not None and run.snapshot is not None
    # No consumer has a checkpoint here: nothing says what is still needed, so nothing
    # is compacted (the job never forces).
    assert run.compacted.snapshot_id is None and current_horizon(coord.engine) == 0
    assert "no consumer has a checkpoint" in run.compacted.reason
    with coord.engine.begin() as conn:  # a consumer that has read everything
        conn.execute(text("INSERT INTO checkpoints (consumer, partition, position) "
                          "VALUES ('indexer:caught-up', 0, :p)"),
                     {"p": current_bound(coord.engine)})
    run = scheduled_snapshot(coord.engine, timedelta(0))
    assert run.outcome == "taken" and run.compacted is not None and run.snapshot is not None
    assert run.compacted.horizon == run.snapshot.position == current_horizon(coord.engine)


def test_one_process_takes_it_while_another_holds_the_lock_or_just_took_it(
    coord: Coordinator,
) -> None:
    coord.create_namespace("o")
    random_ops(coord, "o", 20, seed=73)
    with snapshot_lock(coord.engine) as held:
        assert held
        run = scheduled_snapshot(coord.engine)
    assert run.outcome == "skipped" and "another process" in run.reason
    assert list_snapshots(coord.engine) == []
    # Two "workers" firing for the same tick, at once: exactly one snapshot.
    start = threading.Barrier(2)
    outcomes: list[str] = []

    def fire() -> None:
        start.wait()
        outcomes.append(scheduled_snapshot(coord.engine, min_gap=timedelta(hours=1)).outcome)

    threads = [threading.Thread(target=fire) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcomes) == ["skipped", "taken"]
    assert len(list_snapshots(coord.engine)) == 1


def test_two_workers_on_an_every_second_schedule_take_one_snapshot_per_tick(
    coord: Coordinator, database_url: str, es_url: str, alias: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="pathkeeper.retention")
    coord.create_namespace("w")
    random_ops(coord, "w", 20, seed=74)
    with RunningWorker(database_url, es_url, alias, snapshot_cron="* * * * * *") as a, \
            RunningWorker(database_url, es_url, alias, snapshot_cron="* * * * * *"):
        wait_for(lambda: len(list_snapshots(coord.engine)) >= 3, what="three snapshots")
        a.caught_up(coord)
    with coord.engine.connect() as conn:
        taken = [r[0] for r in conn.execute(text(
            "SELECT taken_at FROM log_snapshots ORDER BY taken_at"))]
    gaps = [(b - a).total_seconds() for a, b in pairwise(taken)]
    assert all(g >= 0.5 for g in gaps), gaps  # never both workers for one tick
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("snapshot_taken") == len(taken)
    assert "snapshot_skipped" in messages


def test_a_failing_snapshot_job_is_logged_and_indexing_goes_on(
    coord: Coordinator, database_url: str, es_url: str, alias: str,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="pathkeeper.retention")

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(retention, "take_snapshot", broken)
    failures = metric(SNAPSHOT_FAILURES)
    coord.create_namespace("f")
    with RunningWorker(database_url, es_url, alias, snapshot_cron="* * * * * *",
                       compact_retain=timedelta(0)) as w:
        wait_for(lambda: metric(SNAPSHOT_FAILURES) >= failures + 2, what="two failed runs")
        random_ops(coord, "f", 20, seed=75)
        w.caught_up(coord)
        assert w.thread.is_alive()
    failed = [r for r in caplog.records if r.getMessage() == "snapshot_failed"]
    assert failed and "disk full" in failed[0].fields["error"]  # type: ignore[attr-defined]
    assert list_snapshots(coord.engine) == []
