"""How far behind the indexer is: per partition and per namespace, in events and seconds.

Lag counts committed events after the partition's checkpoint; its age in seconds
is that of the oldest such event (0 when caught up).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, Engine, text

from coordinator.eventlog import REPORT_AFTER, Writer, writers_in_flight

from .leases import MEMBER_BASE, consumer_key


@dataclass(frozen=True)
class NamespaceLag:
    namespace: str
    events: int
    seconds: float


@dataclass
class PartitionStatus:
    partition: int
    checkpoint: int
    updated_at: datetime | None
    holder_pid: int | None
    lag_events: int = 0
    lag_seconds: float = 0.0
    namespaces: list[NamespaceLag] = field(default_factory=list)


_LAG = text(
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


def partitions(conn: Connection, consumer: str) -> list[PartitionStatus]:
    """The status of every partition of ``consumer`` (empty if it never ran)."""
    count = int(
        conn.execute(
            text("SELECT count(*) FROM checkpoints WHERE consumer = :c"), {"c": consumer}
        ).scalar_one()
    )
    if not count:
        return []
    holders = {
        int(r.objid): int(r.pid)
        for r in conn.execute(
            text(
                "SELECT objid::bigint AS objid, pid FROM pg_locks WHERE locktype = 'advisory' "
                "AND classid = :k AND objsubid = 2 AND objid < :m AND granted"
            ),
            {"k": consumer_key(consumer), "m": MEMBER_BASE},
        )
    }
    out: dict[int, PartitionStatus] = {}
    for r in conn.execute(_LAG, {"c": consumer, "count": count}):
        p = int(r.partition)
        st = out.setdefault(
            p, PartitionStatus(p, int(r.position), r.updated_at, holders.get(p))
        )
        if r.namespace is not None and r.n:
            lag = NamespaceLag(r.namespace, int(r.n), float(r.age or 0.0))
            st.namespaces.append(lag)
            st.lag_events += lag.events
            st.lag_seconds = max(st.lag_seconds, lag.seconds)
    return [out[p] for p in sorted(out)]


def held_back_by(engine: Engine, older_than: float = REPORT_AFTER) -> list[Writer]:
    """Event log writers in flight for ``older_than`` seconds or more: every reader of
    the log (the worker, replay, the change feed) waits for them. Normally empty."""
    return [w for w in writers_in_flight(engine) if (w.age or 0.0) >= older_than]
