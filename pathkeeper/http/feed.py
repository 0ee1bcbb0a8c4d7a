"""The change feed: a long poll over the coordinator's gap-safe event reader.

The app's ``NotifyHub`` (``coordinator.listener``) wakes a waiting request when events
are appended; it re-reads at least every ``POLL_FALLBACK`` seconds anyway (a NOTIFY
can be missed while the listener reconnects, or writers may run with ``notify=False``).
"""

from __future__ import annotations

import time

from coordinator.api import Coordinator
from coordinator.listener import NotifyHub
from coordinator.results import STARTS, Start
from pathkeeper.http.schemas import EventOut, EventsOut
from pathkeeper.http.search import invalid_cursor

POLL_FALLBACK = 1.0


def parse_after(after: str | None) -> int | Start | None:
    """A cursor this endpoint returned; none (from the start of the log); ``now`` (the
    end of the log: what commits from now on) or ``horizon`` (the oldest event kept
    after compaction)."""
    if after is None or after == "":
        return None
    for start in STARTS:
        if after == start:
            return start
    if not after.isdigit() or len(after) > 19:
        raise invalid_cursor("after must be a cursor returned by this endpoint, "
                             "'now' or 'horizon'")
    return int(after)


def follow(
    coord: Coordinator, hub: NotifyHub | None, ns: str, after: int | Start | None,
    limit: int, wait: float,
) -> EventsOut:
    """Events of ``ns`` after the cursor in commit order; waits up to ``wait`` seconds for
    the first one."""
    deadline = time.monotonic() + wait
    cursor: int | Start | None = after
    while True:
        seen = hub.generation if hub is not None else 0
        remaining = deadline - time.monotonic()
        # copied: a namespace moved to this server reads on through its copied events.
        events, cursor = coord.read_events(
            cursor, limit, namespaces=[ns], wait=max(0.05, min(remaining, 5.0)), copied=True
        )
        remaining = deadline - time.monotonic()
        if events or remaining <= 0:
            return EventsOut(events=[EventOut.of(e) for e in events], cursor=str(cursor))
        if hub is not None:
            hub.wait(seen, min(remaining, POLL_FALLBACK))
        else:
            time.sleep(min(remaining, 0.05))
