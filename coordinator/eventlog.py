"""The event log: appended inside the change's transaction, read back in a gap-safe order.

Why positions need care: a sequence value is taken at insert time but the row
becomes visible at commit. If A takes position 10 and B takes 11 and commits
first, a reader that moved its cursor past 11 would never see 10.

The mechanism (no writer ever waits for another writer or for a reader):

* Writing: a transaction's events are buffered and, as its last statement before
  COMMIT, it takes ONE value from
  ``event_position_seq`` (INCREMENT BY ``POSITION_BLOCK``, CACHE 1). That value
  is the base of a block owned by this transaction alone; its events use
  ``base, base+1, ...``. So a transaction's events form one contiguous range.
  The statement that takes the block first forces the transaction's id
  (``pg_current_xact_id()``), so a transaction always has its id, and with it
  the exclusive lock PostgreSQL keeps on that id until the transaction ends,
  before it holds a block.
* Reading (``read_events``), in autocommit, each step a separate statement:
  1. read the sequence's ``last_value`` L. Every position ``<= L + BLOCK - 1``
     belongs to a block handed out before this moment;
  2. list the ids of the transactions running now, from their id locks in
     ``pg_locks``. Every transaction that holds such a block already had its id
     at step 1, so it either ended before step 2 (committed: visible to any
     later statement; aborted: never visible), or is listed;
  3. wait until every listed transaction has ended (its id lock is gone, which
     happens after its commit became visible);
  4. now no position ``<= L + BLOCK - 1`` can ever appear again: read up to it.
  The cursor handed back is that bound (or the end of the last block read, when
  ``limit`` cut the read short), so blocks are never split between reads: a
  reader sees a transaction's events all at once or not at all.

The cost is on the reader: it waits for transactions that were in flight when it
looked, including unrelated long writers. A writer that never ends is ended by
``idle_in_transaction_session_timeout``. Holes (rolled back blocks, unused parts
of a block) are normal and never waited for.

Why not a snapshot's in-progress list (``pg_snapshot_xip``): a snapshot's xmax is
one past the latest *completed* transaction id, and running transactions with an
id at or above it are not listed. A writer that got its id after the last commit
would be missed, and the reader would move past its block (the test
``test_open_transaction_with_the_newest_id_is_not_skipped`` caught exactly this).

What position order promises: transactions that touch the same rows are in commit
order (a transaction takes its block after all its lock waits, and holds its row
locks until commit), and a transaction that read another's committed change comes
after it. Transactions on unrelated rows are in an arbitrary but fixed order. A
change that read an ancestor's old name while a rename of that ancestor was in
flight may carry the old path in its payload at a later position than the rename:
consumers must derive paths from ids (``parent_id``, ``name``) or from ``nodes``;
payload paths are as the writer resolved them.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, text

from .errors import TooLarge
from .models import POSITION_BLOCK

NOTIFY_CHANNEL = "pathkeeper_events"


@dataclass(frozen=True)
class Event:
    position: int
    namespace: str
    type: str
    node_id: str | None
    payload: dict[str, Any]
    committed_at: datetime

    @property
    def transaction_block(self) -> int:
        """Events of one transaction share this value."""
        return self.position // POSITION_BLOCK


def block_end(position: int) -> int:
    """The last position of the block that holds ``position``."""
    return (position // POSITION_BLOCK) * POSITION_BLOCK + POSITION_BLOCK - 1


class EventAppender:
    """Collects one transaction's events and writes them into its own block of positions.

    ``flush`` takes the block and inserts the events in one statement; the unit of
    work runs it as the transaction's last statement, after every lock was granted
    and every read done. So a transaction that built on another one's changes (read
    its committed rows or waited for its row locks) always gets the later positions,
    groups of many operations included, and a rolled-back transaction takes no block.
    """

    def __init__(self, conn: Connection, notify: bool = True) -> None:
        self._conn = conn
        self._notify = notify
        self._base: int | None = None
        self._pending: list[tuple[str, str | None, str, str]] = []

    @property
    def base(self) -> int | None:
        """The first position of this transaction's block, once ``flush`` has run."""
        return self._base

    def append(
        self, namespace: str, type_: str, node_id: uuid.UUID | None, payload: Mapping[str, Any]
    ) -> EventRef:
        if self._base is not None:
            raise RuntimeError("this transaction's events were already written")
        if len(self._pending) >= POSITION_BLOCK:
            raise TooLarge(f"a transaction may append at most {POSITION_BLOCK} events")
        self._pending.append(
            (
                namespace,
                None if node_id is None else str(node_id),
                type_,
                json.dumps(payload, ensure_ascii=False),
            )
        )
        return EventRef(self, len(self._pending) - 1)

    def flush(self) -> None:
        """Take the block and insert the events; a no-op without events or when done."""
        if self._base is not None or not self._pending:
            return
        namespaces, node_ids, types, payloads = (list(c) for c in zip(*self._pending, strict=True))
        # One round trip. The innermost subquery runs first, so the transaction has its
        # id (and the lock on it that readers wait for) before it holds a block.
        self._base = int(
            self._conn.execute(
                text(
                    """
                    WITH block AS (
                        SELECT nextval('event_position_seq') AS base
                        FROM (SELECT pg_current_xact_id() OFFSET 0) AS xact
                    ), written AS (
                        INSERT INTO events (namespace, position, node_id, type, payload)
                        SELECT e.ns, block.base + e.i - 1, CAST(e.node AS uuid), e.type,
                               CAST(e.payload AS jsonb)
                        FROM block, unnest(CAST(:nss AS text[]), CAST(:nodes AS text[]),
                                           CAST(:types AS text[]), CAST(:payloads AS text[]))
                             WITH ORDINALITY AS e(ns, node, type, payload, i)
                    )
                    SELECT base, CASE WHEN :notify THEN pg_notify(:channel, (
                        SELECT string_agg(DISTINCT CAST(hashtext(ns)::bigint & 2147483647
                                                        AS text), ',')
                        FROM unnest(CAST(:nss AS text[])) AS u(ns)
                    )) END
                    FROM block
                    """
                ),
                {
                    "nss": namespaces,
                    "nodes": node_ids,
                    "types": types,
                    "payloads": payloads,
                    # Delivered at commit, once per transaction; the payload names the
                    # partition hashes of its namespaces (``notified_partitions``).
                    "notify": self._notify,
                    "channel": NOTIFY_CHANNEL,
                },
            ).scalar_one()
        )


@dataclass(frozen=True, eq=False)
class EventRef:
    """One appended event; its position is known once its transaction's block is taken."""

    appender: EventAppender
    index: int

    @property
    def position(self) -> int | None:
        base = self.appender.base
        return None if base is None else base + self.index


@dataclass(frozen=True)
class Partition:
    """Namespaces are split into ``count`` partitions by a stable hash of their name."""

    index: int
    count: int

    SQL = "mod(hashtext(namespace)::bigint & 2147483647, :p_count) = :p_index"


def notified_partitions(payload: str | None, count: int) -> set[int] | None:
    """The partitions (of ``count``) a ``pathkeeper_events`` notification concerns.

    A writing transaction's notification carries ``hashtext(namespace) & 0x7fffffff``
    of each namespace it wrote, comma-separated: the hash ``Partition.SQL`` takes
    modulo the partition count, so a consumer with any partition count can tell
    which of its partitions to wake. None (wake every partition) for an empty or
    unreadable payload: a notification without one (an older writer, a test
    helper) still wakes everyone, as before."""
    if not payload:
        return None
    try:
        return {int(h) % count for h in payload.split(",")}
    except ValueError:
        return None


RUNNING_XIDS_SQL = text(
    "SELECT array_agg(DISTINCT CAST(transactionid AS text)) FROM pg_locks "
    "WHERE locktype = 'transactionid' AND mode = 'ExclusiveLock' AND granted "
    "AND (CAST(:xids AS text[]) IS NULL "
    "     OR CAST(transactionid AS text) = ANY(CAST(:xids AS text[])))"
)


def safe_bound(engine: Engine, wait: float = 5.0) -> int | None:
    """The highest position below which no event can still appear, or None on timeout."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        last_value, is_called = conn.execute(
            text("SELECT last_value, is_called FROM event_position_seq")
        ).one()
        if not is_called:
            return 0
        bound = int(last_value) + POSITION_BLOCK - 1
        # A separate statement, hence a list taken after the read above. Only a
        # transaction's own id lock is held in ExclusiveLock mode (waiters ask for Share).
        running = conn.execute(RUNNING_XIDS_SQL, {"xids": None}).scalar_one()
        deadline = time.monotonic() + wait
        delay = 0.0005
        while running:
            if time.monotonic() >= deadline:
                return None
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
            running = conn.execute(RUNNING_XIDS_SQL, {"xids": running}).scalar_one()
        return bound


def read_events(
    engine: Engine,
    after: int | None = None,
    limit: int = 1000,
    *,
    namespaces: Sequence[str] | None = None,
    partition: Partition | None = None,
    until: int | None = None,
    wait: float = 5.0,
) -> tuple[list[Event], int]:
    """Events after ``after`` that are safe to consume, in position order, and the next cursor.

    Whole transactions only: the batch may exceed ``limit`` to finish the last
    transaction it started. ``until`` caps the positions read (for replays as of
    a past position).
    """
    cursor = after or 0
    bound = safe_bound(engine, wait)
    if bound is None:
        return [], cursor
    if until is not None:
        bound = min(bound, until)
    if bound <= cursor:
        return [], cursor
    where = ["position > :after", "position <= :bound"]
    params: dict[str, Any] = {"after": cursor, "bound": bound, "limit": limit}
    if namespaces is not None:
        where.append("namespace = ANY(:nss)")
        params["nss"] = list(namespaces)
    if partition is not None:
        where.append(Partition.SQL)
        params.update(p_count=partition.count, p_index=partition.index)
    columns = "position, namespace, type, node_id, payload, committed_at"
    sql = f"SELECT {columns} FROM events WHERE {' AND '.join(where)} ORDER BY position"
    with engine.connect() as conn:
        rows = list(conn.execute(text(sql + " LIMIT :limit"), params))
        if len(rows) < limit:
            next_cursor = bound
        else:
            # Finish the last transaction's block so no reader sees part of a group.
            last = int(rows[-1].position)
            next_cursor = min(block_end(last), bound)
            rows += conn.execute(
                text(sql),
                {**params, "after": last, "bound": next_cursor},
            ).all()
    events = [
        Event(
            position=int(r.position),
            namespace=r.namespace,
            type=r.type,
            node_id=str(r.node_id) if r.node_id is not None else None,
            payload=r.payload,
            committed_at=r.committed_at,
        )
        for r in rows
    ]
    return events, next_cursor
