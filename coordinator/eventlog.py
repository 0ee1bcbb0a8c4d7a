"""The event log: appended inside the change's transaction, read back in a gap-safe order.

Why positions need care: a sequence value is taken at insert time but the row
becomes visible at commit. If A takes position 10 and B takes 11 and commits
first, a reader that moved its cursor past 11 would never see 10.

The mechanism (no writer ever waits for another writer or for a reader):

* Writing: a transaction's first event takes ONE value from
  ``event_position_seq`` (INCREMENT BY ``POSITION_BLOCK``, CACHE 1). That value
  is the base of a block owned by this transaction alone; its events use
  ``base, base+1, ...``. So a transaction's events form one contiguous range, and
  a transaction always has its transaction id before it takes its block (its
  first event always follows its own write to ``nodes``).
* Reading (``read_events``), in autocommit, each step a separate statement:
  1. read the sequence's ``last_value`` L. Every position ``<= L + BLOCK - 1``
     belongs to a block handed out before this moment;
  2. take a snapshot S. Every transaction that holds such a block already had
     an xid, so it either committed before S (visible), aborted (never visible),
     or is listed in S's in-progress list ``xip``;
  3. wait until every xid of ``xip`` has ended;
  4. now no position ``<= L + BLOCK - 1`` can ever appear again: read up to it.
  The cursor handed back is that bound (or the end of the last block read, when
  ``limit`` cut the read short), so blocks are never split between reads: a
  reader sees a transaction's events all at once or not at all.

The cost is on the reader: it waits for transactions that were in flight when it
looked, including unrelated long writers. A writer that never ends is ended by
``idle_in_transaction_session_timeout``. Holes (rolled back blocks, unused parts
of a block) are normal and never waited for.
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
    """Appends one transaction's events into its own block of positions."""

    def __init__(self, conn: Connection, notify: bool = True) -> None:
        self._conn = conn
        self._notify = notify
        self._base: int | None = None
        self._count = 0

    @property
    def last_position(self) -> int | None:
        return None if self._base is None else self._base + self._count - 1

    def append(
        self, namespace: str, type_: str, node_id: uuid.UUID | None, payload: Mapping[str, Any]
    ) -> int:
        if self._base is None:
            self._base = int(
                self._conn.execute(text("SELECT nextval('event_position_seq')")).scalar_one()
            )
            if self._notify:
                # Delivered at commit, once per transaction (duplicates fold).
                self._conn.execute(text("SELECT pg_notify(:ch, '')"), {"ch": NOTIFY_CHANNEL})
        if self._count >= POSITION_BLOCK:
            raise TooLarge(f"a transaction may append at most {POSITION_BLOCK} events")
        position = self._base + self._count
        self._conn.execute(
            text(
                "INSERT INTO events (namespace, position, node_id, type, payload) "
                "VALUES (:ns, :pos, :node, :type, CAST(:payload AS jsonb))"
            ),
            {
                "ns": namespace,
                "pos": position,
                "node": node_id,
                "type": type_,
                "payload": json.dumps(payload, ensure_ascii=False),
            },
        )
        self._count += 1
        return position


@dataclass(frozen=True)
class Partition:
    """Namespaces are split into ``count`` partitions by a stable hash of their name."""

    index: int
    count: int

    SQL = "mod(hashtext(namespace)::bigint & 2147483647, :p_count) = :p_index"


def safe_bound(engine: Engine, wait: float = 5.0) -> int | None:
    """The highest position below which no event can still appear, or None on timeout."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        last_value, is_called = conn.execute(
            text("SELECT last_value, is_called FROM event_position_seq")
        ).one()
        if not is_called:
            return 0
        bound = int(last_value) + POSITION_BLOCK - 1
        # A separate statement, hence a snapshot taken after the read above.
        xip = conn.execute(
            text("SELECT array_agg(x) FROM pg_snapshot_xip(pg_current_snapshot()) AS x")
        ).scalar_one()
        deadline = time.monotonic() + wait
        delay = 0.0005
        while xip:
            xip = conn.execute(
                text(
                    "SELECT array_agg(x) FROM unnest(CAST(:xip AS xid8[])) AS x "
                    "WHERE pg_xact_status(x) = 'in progress'"
                ),
                {"xip": [str(x) for x in xip]},
            ).scalar_one()
            if not xip:
                break
            if time.monotonic() >= deadline:
                return None
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
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
