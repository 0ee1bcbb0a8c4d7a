"""Waking the worker: LISTEN/NOTIFY first, polling as the fallback.

The coordinator sends ``NOTIFY pathkeeper_events`` in every writing transaction
(delivered at commit), its payload the partition hashes of the namespaces it
wrote (``coordinator.event_reader.notified_partitions``). ``Listener`` holds a
dedicated connection in LISTEN and calls ``wake(payload)`` on each notification
(``wake(None)``, "anything may have changed", after (re)connecting); if that
connection breaks it reconnects with backoff, and meanwhile the worker's
APScheduler interval job (the polling fallback) keeps waking it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg

from coordinator.db import libpq_url
from coordinator.event_appender import NOTIFY_CHANNEL

from .logs import log

logger = logging.getLogger("pathkeeper.indexer")


class Listener:
    """A daemon thread turning notifications on ``channel`` into ``wake(payload)`` calls."""

    def __init__(
        self, database_url: str, wake: Callable[[str | None], None], channel: str = NOTIFY_CHANNEL
    ) -> None:
        self.url = libpq_url(database_url)
        self.wake = wake
        self.channel = channel
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="indexer-listen", daemon=True)
        #: Set once LISTEN is active (tests wait on it before writing).
        self.listening = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        # A worker stopped before it finished starting never started this thread.
        if self._thread.ident is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        delay = 0.1
        while not self._stop.is_set():
            try:
                with psycopg.connect(
                    self.url, autocommit=True, connect_timeout=5,
                    application_name="pathkeeper-indexer-listen",
                    keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
                ) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    self.listening.set()
                    # Events may have committed while we were not listening.
                    self.wake(None)
                    delay = 0.1
                    while not self._stop.is_set():
                        # The timeout only bounds how long a stop request waits.
                        for note in conn.notifies(timeout=0.5, stop_after=1):
                            self.wake(note.payload)
            except psycopg.Error as exc:
                self.listening.clear()
                log(logger, logging.WARNING, "listen_connection_lost", error=str(exc),
                    retry_in=delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)
