"""Waking the processes that wait for new events (the HTTP change feed's long polls).

One background thread LISTENs on the event log's NOTIFY channel (sent after commit by
``coordinator.notifier``) and bumps a generation counter; a waiter re-reads the log
when the counter moves. A NOTIFY can be missed while the listener reconnects, or
writers may run with ``notify=False``: waiters also re-read on a timeout of their own.
"""

from __future__ import annotations

import logging
import threading

import psycopg

from .db import libpq_url
from .event_appender import NOTIFY_CHANNEL

log = logging.getLogger("pathkeeper.listener")


class NotifyHub:
    """Wakes waiters when any transaction appends events, on any of the database
    servers given (each has its own log and its own notifications): a listener
    thread per server."""

    def __init__(self, *database_urls: str) -> None:
        self._urls = [libpq_url(url) for url in database_urls]
        self._cond = threading.Condition()
        self._generation = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def generation(self) -> int:
        with self._cond:
            return self._generation

    def start(self) -> None:
        for url in self._urls:
            thread = threading.Thread(target=self._run, args=(url,), name="pathkeeper-feed",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)

    def wait(self, seen: int, timeout: float) -> None:
        """Return when the generation differs from ``seen`` or after ``timeout``."""
        with self._cond:
            self._cond.wait_for(lambda: self._generation != seen, timeout=max(0.0, timeout))

    def _bump(self) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def _run(self, url: str) -> None:
        delay = 0.1
        while not self._stop.is_set():
            try:
                with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
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
