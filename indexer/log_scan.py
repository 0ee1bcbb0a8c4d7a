"""Reading the event log for rebuilds and checks: a safe position to stop at, and the
events up to it, streamed in position order."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, text

from coordinator import Event
from coordinator.db import streamed
from coordinator.event_reader import OWNED_EVENT_SQL, BoundTimeout, wait_for_bound

from .errors import ReplayError

#: How long a read of the log waits for writers in flight before replay gives up on it.
BOUND_WAIT = 30.0


def scan_events(
    conn: Connection,
    *,
    after: int = 0,
    until: int,
    namespaces: Sequence[str] | None = None,
    batch: int = 5000,
) -> Iterator[Event]:
    """Events with ``after < position <= until`` in position order, streamed by a
    server-side cursor. ``until`` must be a safe position (or the caller's snapshot
    must be the one that defines what exists)."""
    # Without what a move copied here or left here (``OWNED_EVENT_SQL``), as every
    # consumer of this server's log.
    where = "position > :after AND position <= :until AND " + OWNED_EVENT_SQL.format(e="events")
    params: dict[str, Any] = {"after": after, "until": until}
    if namespaces is not None:
        where += " AND namespace = ANY(:nss)"
        params["nss"] = list(namespaces)
    sql = text(
        "SELECT position, namespace, type, node_id, payload, committed_at FROM events "
        f"WHERE {where} ORDER BY position"
    )
    for r in streamed(conn, sql, params, batch):
        yield Event(
            position=int(r.position), namespace=r.namespace, type=r.type,
            node_id=None if r.node_id is None else str(r.node_id), payload=r.payload,
            committed_at=r.committed_at,
        )


def current_bound(engine: Engine, wait: float | None = None) -> int:
    """A safe position: every event at or below it is committed and visible. Raises
    ``ReplayError`` naming the writers still in flight after ``wait`` (default
    ``BOUND_WAIT``) seconds."""
    try:
        return wait_for_bound(engine, BOUND_WAIT if wait is None else wait)
    except BoundTimeout as exc:
        raise ReplayError(f"cannot pick a safe position of the event log: {exc}") from exc
