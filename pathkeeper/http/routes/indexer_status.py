"""``GET /v1/indexer/status``: how far behind the indexer is, per shard and partition, and which
worker holds each partition: what ``pathkeeper indexer status`` prints, for a read key
(the operator page shows it).

A key sees the lag of the namespaces it covers only: a partition's counts are those of
its namespaces' events, and other namespaces are never named. Dead letters and the
event log writers that hold readers back are the whole service's, shown to a key of
every namespace only."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel
from sqlalchemy import Engine

from coordinator import Coordinator
from coordinator.api_keys import ALL
from indexer import deadletters, status
from pathkeeper.http.deps import AnyReader, ConsumerDep, CoordDep
from pathkeeper.http.threads import blocking

router = APIRouter(tags=["indexer"])


class NamespaceLagOut(BaseModel):
    namespace: str
    #: Committed events of the namespace the indexer has not applied yet.
    lag_events: int
    #: The age of the oldest of them (0 when caught up).
    lag_seconds: float


class PartitionOut(BaseModel):
    partition: int
    #: The position through which the partition's events are applied.
    checkpoint: int
    updated_at: datetime | None
    #: The PostgreSQL backend pid of the worker holding the partition (null: none does).
    holder_pid: int | None
    lag_events: int
    lag_seconds: float
    namespaces: list[NamespaceLagOut]


class WriterOut(BaseModel):
    """An event log writer in flight long enough to hold readers back."""

    pid: int | None
    database: str
    age: float | None
    state: str | None
    application_name: str | None
    gid: str | None


class ShardStatusOut(BaseModel):
    """One shard's part: its partitions (of its own log) and lag."""

    name: str
    partitions: list[PartitionOut]
    lag_events: int
    lag_seconds: float


class IndexerStatusOut(BaseModel):
    #: The indexer's checkpoint consumer the service reads (``indexer:<alias>``).
    consumer: str
    #: Empty when that consumer never ran. Every shard's (with several, see ``shards``).
    partitions: list[PartitionOut]
    #: Documents the search server refused for good (null for a key of some namespaces).
    dead_letters_pending: int | None
    #: Writers in flight that every reader of the log waits for (normally none).
    held_back_by: list[WriterOut]
    #: Per shard (PostgreSQL server): one entry for a deployment of one server.
    shards: list[ShardStatusOut]


def service_shards(coord: Coordinator) -> list[tuple[str, Engine]]:
    """The shards the service's coordinator reads, by name, with an engine on each."""
    return [(shard.name, engine) for shard, engine in coord.shard_engines()]


@router.get("/v1/indexer/status", response_model=IndexerStatusOut, name="indexer_status")
@blocking
def indexer_status(who: AnyReader, coord: CoordDep, consumer: ConsumerDep) -> IndexerStatusOut:
    """Per shard and partition: checkpoint, lag (events, seconds) of the key's namespaces,
    holder; for a key of every namespace also the pending dead letters and the writers
    holding the readers back. ``pathkeeper indexer status`` over HTTP."""
    everything = ALL in who.namespaces
    shards = []
    pending = 0
    held_back: list[WriterOut] = []
    for name, engine in service_shards(coord):
        with engine.connect() as conn:
            parts = status.partitions(conn, consumer)
        out = []
        for p in parts:
            mine = [NamespaceLagOut(namespace=n.namespace, lag_events=n.events,
                                    lag_seconds=n.seconds)
                    for n in p.namespaces if who.covers(n.namespace)]
            events = p.lag_events if everything else sum(n.lag_events for n in mine)
            seconds = p.lag_seconds if everything else max(
                (n.lag_seconds for n in mine), default=0.0)
            out.append(PartitionOut(partition=p.partition, checkpoint=p.checkpoint,
                                    updated_at=p.updated_at, holder_pid=p.holder_pid,
                                    lag_events=events, lag_seconds=seconds, namespaces=mine))
        shards.append(ShardStatusOut(
            name=name, partitions=out, lag_events=sum(p.lag_events for p in out),
            lag_seconds=max((p.lag_seconds for p in out), default=0.0)))
        if everything:
            pending += deadletters.count_pending(engine, consumer)
            held_back += [WriterOut(**w.as_dict()) for w in status.held_back_by(engine)]
    return IndexerStatusOut(
        consumer=consumer, partitions=[p for s in shards for p in s.partitions],
        dead_letters_pending=pending if everything else None, held_back_by=held_back,
        shards=shards,
    )
