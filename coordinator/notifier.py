"""Waking the indexer after a commit, without serializing the writers' commits.

``pg_notify`` inside the writing transaction takes a cluster-wide lock at commit and
holds it through the commit record's flush, so notifying commits cannot share a WAL
flush (bench/README.md: 1.3-1.5x fewer commits/s with it). Here the writer only marks
"something committed" (a condition variable, no I/O) after its COMMIT returned; one
thread per ``Coordinator`` sends ``pg_notify`` on a connection it keeps, from a pool of
its own (kept in the writers' pool, it would take one of theirs for good, all of a pool
of one; given back after each notify, it would be reopened whenever that pool is full),
once for every writer that committed since its last one. That
notify is its own tiny transaction: it has a transaction id but writes no other WAL, so
PostgreSQL commits it without waiting for a flush and the lock is held for microseconds.

Under load a notify per commit would still cost every writer a statement: a
process's notifies are at least ``min_interval`` apart. The first commit after a quiet
spell is announced at once, so a lone change reaches the indexer as fast as before;
under load a wake-up may wait up to ``min_interval`` for the next notify, while the
indexer, busy with the commits before it, has rarely gone to sleep.

Same channel and payload as a notify inside the transaction (the partition hashes of
the namespaces written, see ``event_reader.notified_partitions``; here of every namespace
written since the last one), so listeners (indexer/wakeup.py, the HTTP change feed)
see no difference but one wake-up for several commits, which is all a wake-up means:
"read the log", here for these partitions. Latency: one round trip after the commit. If the
process dies between a commit and its notify, the indexer's polling interval covers
it, exactly as for a lost notification before.
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg
from sqlalchemy import Engine
from sqlalchemy.pool import PoolProxiedConnection

from .db import driver_sql
from .event_appender import NOTIFY_CHANNEL

log = logging.getLogger("pathkeeper.notifier")

# Sent through psycopg itself, prepared: SQLAlchemy's own work per
# statement was most of a notify's client CPU, and a busy writer process sends up to
# one per interval.
_NOTIFY_SQL = driver_sql(
    "SELECT pg_notify(:c, coalesce((SELECT string_agg(DISTINCT "
    "CAST(hashtext(ns)::bigint & 2147483647 AS text), ',') "
    "FROM unnest(CAST(:nss AS text[])) AS u(ns)), ''))",
    binary=("nss",),
)


class Notifier:
    """Coalesces "a transaction with events committed" into NOTIFYs on its own thread."""

    def __init__(
        self, engine: Engine, *, min_interval: float, channel: str = NOTIFY_CHANNEL
    ) -> None:
        # The same connection settings as the writers' (``Pool.recreate``), not their pool.
        self._pool = engine.pool.recreate()
        self._channel = channel
        self._min_interval = min_interval
        self._cond = threading.Condition()
        self._pending = False
        self._namespaces: set[str] = set()
        self._closed = False
        self._thread: threading.Thread | None = None

    def poke(self, namespace: str) -> None:
        """Called after a commit that wrote events in ``namespace``; returns at once."""
        with self._cond:
            if self._closed:
                return
            waiting = not self._pending  # else the thread is up, or soon will be
            self._pending = True
            self._namespaces.add(namespace)
            if self._thread is None:  # started on first use: readers-only processes never
                self._thread = threading.Thread(
                    target=self._run, name="pathkeeper-notify", daemon=True
                )
                self._thread.start()
            if waiting:
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)

    def _run(self) -> None:
        conn: PoolProxiedConnection | None = None
        sent = -self._min_interval
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:  # closed, nothing left to send
                    break
                # Too soon after the last one: gather the commits until it is time.
                while not self._closed and (
                    wait := sent + self._min_interval - time.monotonic()
                ) > 0:
                    self._cond.wait(wait)
                self._pending = False
                namespaces = sorted(self._namespaces)
                self._namespaces.clear()
            try:
                if conn is None:
                    conn = self._pool.connect()
                psy = conn.driver_connection
                assert isinstance(psy, psycopg.Connection)
                psy.autocommit = True  # the notify is a transaction of its own
                with psy.cursor() as cur:
                    cur.execute(_NOTIFY_SQL, {"c": self._channel, "nss": namespaces})
                sent = time.monotonic()
            except Exception as exc:  # the server restarted, or is down: next poke retries
                log.warning("could not notify %s: %s", self._channel, exc)
                if conn is not None:
                    conn.invalidate()
                    conn = None
        if conn is not None:
            conn.close()
        self._pool.dispose()
