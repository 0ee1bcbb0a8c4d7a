"""Read-your-writes for search, and how far behind the indexer is.

Reads only the ``checkpoints`` and ``events`` tables, so it does not depend on the
indexer package; the indexer's status, its metrics and the HTTP ``/readyz`` all
read their lag here. The indexer keeps one checkpoint row per partition of a consumer
(``indexer.checkpoints``), moves each forward only after Elasticsearch
acknowledged everything up to it, and sends ``NOTIFY pathkeeper_indexed`` in
the same transaction: a waiter is woken at once and polls only as a fallback.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, Engine, text

#: The search alias services read and the indexer writes by default. Defined here,
#: in the core, not in the indexer's search contract (``indexer.contract``, which
#: re-exports it): the core names the indexer's checkpoint consumer after the alias
#: (``DEFAULT_CONSUMER``, what ``wait_indexed`` waits for), and the core may not
#: import the indexer. One definition, visible to every layer from below.
DEFAULT_ALIAS = "pathkeeper-nodes"
INDEXED_CHANNEL = "pathkeeper_indexed"

#: A lost notification costs at most this much latency.
_POLL = 0.25


def consumer_for(alias: str, consumer: str | None = None) -> str:
    """The checkpoint consumer name of the indexer writing to ``alias``: ``consumer``
    when one is given (the operator's ``--consumer``), else ``indexer:<alias>``."""
    return consumer or f"indexer:{alias}"


#: The consumer name of the indexer writing to the default alias.
DEFAULT_CONSUMER = consumer_for(DEFAULT_ALIAS)


def indexed_through(conn: Connection, consumer: str = DEFAULT_CONSUMER) -> int | None:
    """The position through which every partition of ``consumer`` has been applied
    (the smallest checkpoint), or None if the consumer has never run."""
    count, low = conn.execute(
        text("SELECT count(*), min(position) FROM checkpoints WHERE consumer = :c"),
        {"c": consumer},
    ).one()
    return int(low) if count else None


def indexed_elsewhere(conn: Connection, namespace: str) -> int:
    """The position through which ``namespace``'s log was written, and indexed, on the
    shard it was moved from (``namespace_placement.log_from``; 0: it was never moved
    here). Its positions up to there are not this shard's to index (docs/sharding.md,
    section 3)."""
    log_from = conn.execute(
        text("SELECT log_from FROM namespace_placement WHERE namespace = :ns"),
        {"ns": namespace},
    ).scalar_one_or_none()
    return int(log_from) if log_from is not None else 0


def wait_indexed(
    engine: Engine, seq: int, timeout: float = 10.0, consumer: str = DEFAULT_CONSUMER,
    namespace: str | None = None,
) -> bool:
    """True once every event at position ``<= seq`` is applied to the index by
    ``consumer`` (every partition's checkpoint ``>= seq``); False after ``timeout``
    seconds. ``engine`` is one shard's: its checkpoints, and ``seq`` a position of its log.

    ``namespace``: the namespace ``seq`` was written in, on ``engine``'s shard. A ``seq``
    up to its ``log_from`` (written before the namespace was moved here) was indexed by
    the shard it was moved from before the move finished, so it is done at once."""
    deadline = time.monotonic() + timeout
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        # LISTEN before the first check, so a checkpoint written in between still wakes us.
        conn.exec_driver_sql(f"LISTEN {INDEXED_CHANNEL}")
        try:
            driver = conn.connection.driver_connection
            while True:
                if namespace is not None and seq <= indexed_elsewhere(conn, namespace):
                    return True
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
class NamespaceLag:
    namespace: str
    events: int
    seconds: float


@dataclass
class PartitionLag:
    """Committed events after one partition's checkpoint, and the age in seconds of
    the oldest of them (0 when caught up), per namespace and in all."""

    partition: int
    checkpoint: int
    updated_at: datetime | None
    events: int = 0
    seconds: float = 0.0
    namespaces: list[NamespaceLag] = field(default_factory=list)


@dataclass(frozen=True)
class Lag:
    """A consumer's lag over all its partitions: ``checkpoint`` is the position
    through which everything is applied (``indexed_through``)."""

    checkpoint: int
    events: int
    seconds: float


_PARTITION_LAG = text(
    """
    SELECT c.partition, c.position, c.updated_at, e.namespace,
           count(e.position) AS n,
           EXTRACT(EPOCH FROM clock_timestamp() - min(e.committed_at)) AS age
      FROM checkpoints c
      LEFT JOIN events e
        ON e.position > c.position
       AND mod(hashtext(e.namespace)::bigint & 2147483647, :count) = c.partition
     WHERE c.consumer = :c
     GROUP BY c.partition, c.position, c.updated_at, e.namespace
     ORDER BY c.partition, e.namespace
    """
)


def partition_lags(conn: Connection, consumer: str = DEFAULT_CONSUMER) -> list[PartitionLag]:
    """The lag of every partition of ``consumer``, by partition (empty if it never ran)."""
    count = int(
        conn.execute(
            text("SELECT count(*) FROM checkpoints WHERE consumer = :c"), {"c": consumer}
        ).scalar_one()
    )
    if not count:
        return []
    out: dict[int, PartitionLag] = {}
    for r in conn.execute(_PARTITION_LAG, {"c": consumer, "count": count}):
        p = int(r.partition)
        st = out.setdefault(p, PartitionLag(p, int(r.position), r.updated_at))
        if r.namespace is not None and r.n:
            lag = NamespaceLag(r.namespace, int(r.n), float(r.age or 0.0))
            st.namespaces.append(lag)
            st.events += lag.events
            st.seconds = max(st.seconds, lag.seconds)
    return [out[p] for p in sorted(out)]


def lag(conn: Connection, consumer: str = DEFAULT_CONSUMER) -> Lag | None:
    """``consumer``'s lag over all its partitions (None if it never ran): the events
    not yet applied, and the age of the oldest of them."""
    parts = partition_lags(conn, consumer)
    if not parts:
        return None
    return Lag(
        checkpoint=min(p.checkpoint for p in parts),
        events=sum(p.events for p in parts),
        seconds=max(p.seconds for p in parts),
    )


def probe_lag(engine: Engine, consumer: str = DEFAULT_CONSUMER) -> Lag | None:
    """For readiness probes: ``consumer``'s lag (None if it never ran), read on a new
    connection. Driver errors are raised as they are: a probe reports them, it does not
    retry."""
    with engine.connect() as conn:
        return lag(conn, consumer)
