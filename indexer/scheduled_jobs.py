"""The worker's scheduled jobs besides the poll: lag metrics, ``verify`` on a crontab
schedule, event log snapshots (and compaction) on a crontab schedule."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

from sqlalchemy import Engine

from coordinator import Coordinator
from coordinator.indexing import wait_indexed

from . import deadletters, metrics, status
from .logs import log
from .search_engine import SearchEngine

logger = logging.getLogger("pathkeeper.indexer")
#: How long a scheduled verify waits for this worker to apply recent events before it
#: counts what still differs as drift.
VERIFY_SETTLE_SECONDS = 30.0


def refresh_lag_metrics(engine: Engine, consumer: str, label_prefix: str = "") -> None:
    """The lag gauges, from the query of ``pathkeeper indexer status``, and the count
    of pending dead letters (of one shard: ``label_prefix`` before its partitions)."""
    try:
        with engine.connect() as conn:
            for st in status.partitions(conn, consumer):
                label = f"{label_prefix}{st.partition}"
                metrics.LAG_EVENTS.labels(consumer, label).set(st.lag_events)
                metrics.LAG_SECONDS.labels(consumer, label).set(st.lag_seconds)
        metrics.DEAD_LETTERS_PENDING.labels(consumer).set(
            deadletters.count_pending(engine, consumer)
        )
    except Exception as exc:
        log(logger, logging.WARNING, "lag_metrics_failed", error=str(exc))


def add_verify(
    scheduler: Any, shards: list[tuple[str, Coordinator]], es: SearchEngine, alias: str,
    consumer: str, cron: str,
) -> None:
    """Schedule ``verify`` of the worker's alias over its shards (name, coordinator). A
    document that differs only because this worker has not applied the latest events
    yet is rechecked after waiting (bounded) for this consumer to catch up on that
    document's shard, so it is not counted as drift."""
    from .verify import add_verify_job, scheduled_verify
    from .verify_shards import scheduled_verify_shards

    def settle_for(coord: Coordinator) -> Callable[[int], bool]:
        return lambda position: wait_indexed(coord.engine, position, VERIFY_SETTLE_SECONDS,
                                             consumer)

    if len(shards) == 1:
        coord = shards[0][1]
        job = partial(scheduled_verify, coord, es, alias, settle=settle_for(coord))
    else:
        job = partial(scheduled_verify_shards, shards, es, alias, settle_for)
    add_verify_job(scheduler, job, cron)
    log(logger, logging.INFO, "verify_scheduled", cron=cron, alias=alias)


def add_snapshot(
    scheduler: Any, engine: Engine, cron: str, compact_retain: timedelta | None,
    shard: str = "",
) -> None:
    """Schedule snapshots of the event log of one shard (and compaction, with a
    retention); with several workers one takes each (``indexer.retention``)."""
    from .retention import add_snapshot_job

    add_snapshot_job(scheduler, engine, cron, compact_retain,
                     job_id=f"pathkeeper-snapshot-{shard}" if shard else "pathkeeper-snapshot")
    log(logger, logging.INFO, "snapshot_scheduled", cron=cron, shard=shard or None,
        compact_retain=None if compact_retain is None else compact_retain.total_seconds())
