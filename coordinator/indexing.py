"""Read-your-writes for search: wait until the indexer has applied an event position.

Reads only the ``checkpoints`` table, so it does not depend on the indexer
package. The indexer keeps one checkpoint row per partition of a consumer
(``indexer.checkpoints``), moves each forward only after Elasticsearch
acknowledged everything up to it, and sends ``NOTIFY pathkeeper_indexed`` in
the same transaction: a waiter is woken at once and polls only as a fallback.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text

#: The consumer name of the indexer writing to the default alias.
DEFAULT_CONSUMER = "indexer:pathkeeper-nodes"
INDEXED_CHANNEL = "pathkeeper_indexed"

#: A lost notification costs at most this much latency.
_POLL = 0.25


def consumer_for(alias: str) -> str:
    """The checkpoint consumer name of the indexer writing to ``alias``."""
    return f"indexer:{alias}"


def indexed_through(conn: Connection, consumer: str = DEFAULT_CONSUMER) -> int | None:
    """The position through which every partition of ``consumer`` has been applied
    (the smallest checkpoint), or None if the consumer has never run."""
    count, low = conn.execute(
        text("SELECT count(*), min(position) FROM checkpoints WHERE consumer = :c"),
        {"c": consumer},
    ).one()
    return int(low) if count else None


def wait_indexed(
    engine: Engine, seq: int, timeout: float = 10.0, consumer: str = DEFAULT_CONSUMER
) -> bool:
    """True once every event at position ``<= seq`` is applied to the index by
    ``consumer`` (every partition's checkpoint ``>= seq``); False after ``timeout``
    seconds."""
    deadline = time.monotonic() + timeout
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        # LISTEN before the first check, so a checkpoint written in between still wakes us.
        conn.exec_driver_sql(f"LISTEN {INDEXED_CHANNEL}")
        try:
            driver = conn.connection.driver_connection
            while True:
                done = indexed_through(conn, consumer)
                if done is not None and done >= seq:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                for _ in driver.notifies(timeout=min(remaining, _POLL), stop_after=1):  # type: ignore[union-attr]
                    pass
        finally:
            conn.exec_driver_sql("UNLISTEN *")


@dataclass(frozen=True)
class IndexerLag:
    """How far ``consumer`` is behind the event log; ``checkpoint`` None: it never ran
    (and the lag is unknown)."""

    checkpoint: int | None
    events: int | None
    seconds: float | None


def indexer_lag(engine: Engine, consumer: str = DEFAULT_CONSUMER) -> IndexerLag:
    """The lag of ``consumer`` (events counted up to a million), for readiness probes.
    Driver errors are raised as they are: a probe reports them, it does not retry."""
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))
        lag = conn.execute(
            text(
                """
                WITH cp AS (SELECT min(position) AS p FROM checkpoints
                            WHERE consumer = :c)
                SELECT (SELECT p FROM cp) AS checkpoint,
                       (SELECT count(*) FROM (SELECT 1 FROM events, cp
                         WHERE events.position > cp.p LIMIT 1000000) s) AS behind,
                       (SELECT extract(epoch FROM now() - min(committed_at))
                          FROM events, cp WHERE events.position > cp.p) AS seconds
                """
            ),
            {"c": consumer},
        ).one()
    if lag.checkpoint is None:
        return IndexerLag(None, None, None)
    return IndexerLag(int(lag.checkpoint), int(lag.behind), float(lag.seconds or 0.0))
