"""The first start of a consumer on a compacted log: build its index from ``nodes``.

A new consumer (a worker for a new alias, or one whose checkpoints never left the
start) would read the log from position 0; once compaction deleted the events up to
the horizon that read raises ``CursorExpired``, and there is nothing the log can give
it. It does not need the old events: it needs the state they led to. So the worker
builds its index as ``reindex`` does (``indexer.replay.rebuild`` from one REPEATABLE
READ snapshot of ``nodes`` taken after a safe position V0, the events after V0 on top,
then the atomic alias swap) and the rebuild moves the consumer's checkpoints to the
position the new index holds; the worker reads on from there, as after any rebuild.

Only a consumer that never indexed anything is bootstrapped: one whose checkpoints
moved and then fell below the horizon (``compact --force``) keeps an index that an
operator may want to look at, and gets the ``cursor_expired`` line naming
``pathkeeper replay`` (``indexer.retention``).

Several workers of the consumer starting at once: each takes the bootstrap lock
(a session advisory lock, so a killed worker frees it), the first builds, the others
wait for it and then find the checkpoints moved.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy import text

from coordinator import Coordinator
from coordinator.event_reader import horizon

from . import checkpoints
from .contract import IndexShape
from .leases import consumer_key
from .logs import log
from .replay import rebuild
from .search_engine import SearchEngine

logger = logging.getLogger("pathkeeper.indexer")

#: Second key of the bootstrap lock, ``pg_advisory_lock(consumer_key, BOOTSTRAP_LOCK)``:
#: above the partition leases (which ``checkpoints.ensure_layout`` counts) and the
#: member slots (``leases.MEMBER_BASE`` on).
BOOTSTRAP_LOCK = 2_000_000


def needs_bootstrap(coord: Coordinator, consumer: str) -> int:
    """The compaction horizon, if ``consumer`` never indexed anything (no checkpoint past
    the start) and the log no longer starts at the start; else 0."""
    with coord.engine.connect() as conn:
        oldest = horizon(conn)
        if oldest == 0:
            return 0
        if any(p > 0 for p in checkpoints.load_all(conn, consumer).values()):
            return 0
    return oldest


def bootstrap(
    coord: Coordinator, es: SearchEngine, alias: str, consumer: str, partitions: int,
    stop: threading.Event, shape: IndexShape | None = None,
) -> bool:
    """Build ``alias``'s index from ``nodes`` if the consumer needs it (``needs_bootstrap``),
    unless another worker does it first; whether this call built it. Returns early
    (False) if ``stop`` is set while waiting for another worker's build. ``shape``: the
    new index's (default: the live index's, else the default shape)."""
    if not needs_bootstrap(coord, consumer):
        return False
    conn = coord.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    lock = {"k": consumer_key(consumer), "b": BOOTSTRAP_LOCK}
    try:
        while not conn.execute(text("SELECT pg_try_advisory_lock(:k, :b)"), lock).scalar_one():
            if stop.wait(0.2):
                return False
        # Another worker may have built it while we waited.
        oldest = needs_bootstrap(coord, consumer)
        if not oldest:
            return False
        started = time.monotonic()
        log(logger, logging.WARNING, "bootstrap_started", alias=alias, consumer=consumer,
            horizon=oldest,
            reason="the event log was compacted before this consumer indexed anything: "
                   "its index is built from a snapshot of nodes, as reindex does")
        # The rows the rebuild moves to the position its index holds.
        checkpoints.ensure_layout(coord.engine, consumer, partitions)
        result = rebuild(coord, es, source="snapshot", alias=alias, consumer=consumer,
                         shape=shape)
        log(logger, logging.INFO, "bootstrapped_from_snapshot", alias=alias,
            consumer=consumer, index=result.index, position=result.position,
            checkpoint=result.final_position, documents=result.documents,
            tail_events=result.tail_events, replaced=result.old_indices or None,
            seconds=round(time.monotonic() - started, 3))
        return True
    finally:
        # Never hand a session that might still hold the lock back to the pool.
        conn.invalidate()
        conn.close()
