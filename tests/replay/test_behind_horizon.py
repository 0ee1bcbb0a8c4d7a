"""A consumer whose checkpoint fell below the compaction horizon (``compact --force``)
is rebuilt by one command: the worker refuses with a log line naming it, ``pathkeeper
replay`` rebuilds the index and moves the consumer's checkpoints, and the running worker
reads on from there; the index then equals PostgreSQL."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from coordinator import Coordinator
from coordinator.indexing import consumer_for
from indexer.retention import compact, take_snapshot
from indexer.search_engine import SearchEngine
from indexer.verify import verify_index, verify_log
from pathkeeper.cli.main import main

from .conftest import RunningWorker, diff_summary, expected_index, index_docs
from .replay_workload import random_ops


def checkpoints_of(coord: Coordinator, alias: str) -> list[int]:
    with coord.engine.connect() as conn:
        return [int(p) for p in conn.execute(text(
            "SELECT position FROM checkpoints WHERE consumer = :c ORDER BY partition"),
            {"c": consumer_for(alias)}).scalars()]


def records(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == event]


def test_replay_moves_a_consumer_behind_the_horizon_forward_and_the_worker_reads_on(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="pathkeeper.indexer")
    coord.create_namespace("h")
    random_ops(coord, "h", 40, seed=61)
    with RunningWorker(database_url, es_url, alias) as w:
        w.caught_up(coord)
    # The worker is stopped; the log goes on, is snapshotted and compacted past it.
    random_ops(coord, "h", 40, seed=62)
    snap = take_snapshot(coord.engine)
    assert compact(coord.engine, timedelta(0)).snapshot_id is None  # its checkpoints hold
    assert compact(coord.engine, timedelta(0), force=True).horizon == snap.position
    behind = checkpoints_of(coord, alias)
    assert max(behind) < snap.position

    with RunningWorker(database_url, es_url, alias) as w:
        deadline = time.monotonic() + 30
        while not records(caplog, "cursor_expired"):
            assert time.monotonic() < deadline, "the worker never reported cursor_expired"
            time.sleep(0.05)
        fix = records(caplog, "cursor_expired")[0].fields["fix"]  # type: ignore[attr-defined]
        assert f"`pathkeeper replay --alias {alias}`" in fix, fix
        assert checkpoints_of(coord, alias) == behind  # it applied nothing meanwhile

        res = CliRunner().invoke(main, ["replay", "--database-url", database_url, "--es-url",
                                        es_url, "--alias", alias, "-q"])
        assert res.exit_code == 0, res.output
        assert "moved 2 checkpoints of the live worker" in res.output, res.output
        assert min(checkpoints_of(coord, alias)) >= snap.position

        random_ops(coord, "h", 20, seed=63)  # the worker indexes these itself
        w.caught_up(coord)
        assert records(caplog, "checkpoint_moved_by_rebuild")
    got, want = index_docs(es, alias), expected_index(coord)
    assert got == want, diff_summary(got, want)
    assert verify_index(coord, es, alias=alias).drift == []
    assert verify_log(coord).ok


def test_workers_for_a_new_alias_after_compaction_bootstrap_from_nodes_and_converge(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Compaction up to another consumer's checkpoint (no --force), then the first start of
    a worker for a new alias: it cannot read the log from the start, so it builds its
    index from a REPEATABLE READ snapshot of nodes (as reindex does) and reads on from
    there. Two workers start at once, while writes go on; one of them bootstraps."""
    caplog.set_level(logging.INFO, logger="pathkeeper.indexer")
    for ns in ("old", "busy"):
        coord.create_namespace(ns)
        random_ops(coord, ns, 40, seed=71 + len(ns))
    snap = take_snapshot(coord.engine)
    with coord.engine.begin() as conn:  # another index's consumer, caught up
        conn.execute(text("INSERT INTO checkpoints (consumer, partition, position) "
                          "VALUES ('indexer:elsewhere', 0, :p)"), {"p": snap.position})
    done = compact(coord.engine, timedelta(0))
    assert done.horizon == snap.position and done.events_deleted > 0
    coord.create_namespace("new")  # after the horizon
    random_ops(coord, "new", 20, seed=73)

    workers = [RunningWorker(database_url, es_url, alias) for _ in range(2)]
    for w in workers:
        w.thread.start()
    writes = threading.Thread(target=random_ops, args=(coord, "busy", 60), kwargs={"seed": 74})
    writes.start()
    try:
        for w in workers:
            assert w.worker.ready.wait(60), "a worker did not start"
        writes.join(60)
        random_ops(coord, "old", 20, seed=75)
        workers[0].caught_up(coord, timeout=30)
    finally:
        for w in workers:
            w.__exit__()
    assert len(records(caplog, "bootstrapped_from_snapshot")) == 1
    assert not records(caplog, "cursor_expired")
    assert min(checkpoints_of(coord, alias)) >= snap.position
    got, want = index_docs(es, alias), expected_index(coord)
    assert got == want, diff_summary(got, want)
    assert verify_index(coord, es, alias=alias).drift == []


def test_compaction_without_any_checkpoint_needs_force(coord: Coordinator) -> None:
    """With no consumer checkpoint at all nothing says how far anyone has read: the
    snapshot is kept, the events too, unless --force."""
    coord.create_namespace("q")
    random_ops(coord, "q", 20, seed=81)
    snap = take_snapshot(coord.engine)
    refused = compact(coord.engine, timedelta(0))
    assert refused.snapshot_id is None and "no consumer has a checkpoint" in refused.reason
    assert compact(coord.engine, timedelta(0), force=True).horizon == snap.position
