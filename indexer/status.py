"""How far behind the indexer is: per shard, per partition and per namespace, in events and
seconds, with the worker holding each partition.

Lag counts committed events after the partition's checkpoint; its age in seconds
is that of the oldest such event (0 when caught up). The query is the core's
(``coordinator.indexing``), which ``/readyz`` reads too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, Engine, text

from coordinator.event_reader import (
    REPORT_AFTER,
    WriterInFlight,
    writers_in_flight,
)
from coordinator.indexing import NamespaceLag, partition_lags
from coordinator.shard_map import Shard

from .leases import IN_THIS_DATABASE, MEMBER_BASE, consumer_key


@dataclass
class PartitionStatus:
    partition: int
    checkpoint: int
    updated_at: datetime | None
    holder_pid: int | None
    lag_events: int = 0
    lag_seconds: float = 0.0
    namespaces: list[NamespaceLag] = field(default_factory=list)


def partitions(conn: Connection, consumer: str) -> list[PartitionStatus]:
    """The status of every partition of ``consumer`` (empty if it never ran): its lag
    (``coordinator.indexing.partition_lags``) and the pid of the worker holding it."""
    lags = partition_lags(conn, consumer)
    if not lags:
        return []
    holders = {
        int(r.objid): int(r.pid)
        for r in conn.execute(
            text(
                "SELECT objid::bigint AS objid, pid FROM pg_locks WHERE locktype = 'advisory' "
                "AND classid = :k AND objsubid = 2 AND objid < :m AND granted AND "
                + IN_THIS_DATABASE
            ),
            {"k": consumer_key(consumer), "m": MEMBER_BASE},
        )
    }
    return [
        PartitionStatus(p.partition, p.checkpoint, p.updated_at, holders.get(p.partition),
                        p.events, p.seconds, p.namespaces)
        for p in lags
    ]


def held_back_by(engine: Engine, older_than: float = REPORT_AFTER) -> list[WriterInFlight]:
    """Event log writers in flight for ``older_than`` seconds or more: every reader of
    the log (the worker, replay, the change feed) waits for them. Normally empty."""
    return [w for w in writers_in_flight(engine) if (w.age or 0.0) >= older_than]


@dataclass
class ShardStatus:
    """One shard's part of a consumer's status: its partitions (of its own log), its
    dead letters and the writers its readers wait for; ``error`` if it did not answer."""

    shard: str
    partitions: list[PartitionStatus] = field(default_factory=list)
    log_has_events: bool = False
    dead_letters_pending: int = 0
    held_back_by: list[WriterInFlight] = field(default_factory=list)
    error: str | None = None


def shard_status(shard: Shard, consumer: str) -> ShardStatus:
    """``consumer``'s status on ``shard``, read on a connection of its own."""
    from coordinator import Coordinator

    from .deadletters import count_pending

    with Coordinator.connect(shard.database_url()) as coord:
        with coord.engine.connect() as conn:
            parts = partitions(conn, consumer)
            has_events = bool(conn.execute(
                text("SELECT EXISTS (SELECT FROM events)")).scalar_one())
        return ShardStatus(shard.name, parts, has_events,
                           count_pending(coord.engine, consumer), held_back_by(coord.engine))


def shards_status(shards: list[Shard], consumer: str) -> list[ShardStatus]:
    """Every shard's status. With one shard its errors are raised; with several, a shard
    that does not answer is reported (``error``) and the others are read on."""
    if len(shards) == 1:
        return [shard_status(shards[0], consumer)]
    out = []
    for shard in shards:
        try:
            out.append(shard_status(shard, consumer))
        except Exception as exc:
            first_line = (str(exc).splitlines() or [""])[0]
            out.append(ShardStatus(shard.name, error=f"{type(exc).__name__}: {first_line}"))
    return out
