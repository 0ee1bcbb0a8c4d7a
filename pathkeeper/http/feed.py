"""The change feed: a long poll over the coordinator's gap-safe event reader.

One background thread per app LISTENs on the coordinator's NOTIFY channel and
bumps a generation counter; a waiting request re-reads when the counter moves,
and at least every ``POLL_FALLBACK`` seconds anyway (a NOTIFY can be missed while
the listener reconnects, or writers may run with ``notify=False``).
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg

from coordinator.api import Coordinator
from coordinator.db import libpq_url
from coordinator.eventlog import NOTIFY_CHANNEL
from pathkeeper.http.schemas import EventOut, EventsOut
from pathkeeper.http.search import invalid_cursor

log = logging.getLogger("pathkeeper.service.feed")

POLL_FALLBACK = 1.0


class NotifyHub:
    """Wakes waiters when any transaction appends events."""

    def __init__(self, database_url: str) -> None:
        self._url = libpq_url(database_url)
        self._cond = threading.Condition()
        self._generation = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[object] | None = None

    @property
    def generation(self) -> int:
        with self._cond:
            return self._generation

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pathkeeper-feed", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def wait(self, seen: int, timeout: float) -> None:
        """Return when the generation differs from ``seen`` or after ``timeout``."""
        with self._cond:
            self._cond.wait_for(lambda: self._generation != seen, timeout=max(0.0, timeout))

    def _bump(self) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def _run(self) -> None:
        delay = 0.1
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._url, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    delay = 0.1
                    self._bump()  # we may have missed some while (re)connecting
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=0.5, stop_after=1):
                            self._bump()
            except psycopg.Error as exc:
                if self._stop.is_set():
                    return
                log.warning("change feed listener lost its connection: %s", exc)
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)


def parse_after(after: str | None) -> int | None:
    if after is None or after == "":
        return None
    if not after.isdigit() or len(after) > 19:
        raise invalid_cursor("after must be a cursor returned by this endpoint")
    return int(after)


def follow(
    coord: Coordinator, hub: NotifyHub | None, ns: str, after: int | None, limit: int,
    wait: float,
) -> EventsOut:
    """Events of ``ns`` after the cursor in commit order; waits up to ``wait`` seconds for
    the first one."""
    deadline = time.monotonic() + wait
    cursor = after
    while True:
        seen = hub.generation if hub is not None else 0
        remaining = deadline - time.monotonic()
        events, cursor = coord.read_events(
            cursor, limit, namespaces=[ns], wait=max(0.05, min(remaining, 5.0))
        )
        remaining = deadline - time.monotonic()
        if events or remaining <= 0:
            return EventsOut(events=[EventOut.of(e) for e in events], cursor=str(cursor))
        if hub is not None:
            hub.wait(seen, min(remaining, POLL_FALLBACK))
        else:
            time.sleep(min(remaining, 0.05))
