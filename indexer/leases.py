"""Partition leases: session-level advisory locks on one dedicated connection.

A worker holds partition ``p`` of a consumer by holding
``pg_advisory_lock(consumer_key, p)`` on a connection it keeps open. If the
process dies (even by ``kill -9``) the server ends the session and the lease is
free at once; no expiry timers, no clock. Workers also take a "member" lock
(``MEMBER_BASE + slot``) so that each can count the live workers and take only
its fair share of partitions.
"""

from __future__ import annotations

import zlib

import psycopg

from coordinator.db import libpq_url

#: Member slots use lock ids from here on; partitions use 0 .. MEMBER_BASE-1.
MEMBER_BASE = 1_000_000
#: ``pg_locks`` lists every database of the server, and advisory locks are per database:
#: two shards may be two databases of one server, each with its own leases.
IN_THIS_DATABASE = "database = (SELECT oid FROM pg_database WHERE datname = current_database())"
_MAX_MEMBERS = 4096


def consumer_key(consumer: str) -> int:
    """A stable positive 31-bit key for the consumer's advisory locks."""
    return zlib.crc32(consumer.encode("utf-8")) & 0x7FFFFFFF


class Leases:
    """The lease connection of one worker process. Not thread-safe: one owner thread."""

    def __init__(self, database_url: str, consumer: str) -> None:
        self.url = libpq_url(database_url)
        self.consumer = consumer
        self.key = consumer_key(consumer)
        self.held: set[int] = set()
        self.slot: int | None = None
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None

    def _connection(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._conn is None or self._conn.closed:
            self.held.clear()
            self.slot = None
            self._conn = psycopg.connect(
                self.url, autocommit=True, connect_timeout=5,
                application_name="pathkeeper-indexer-leases",
                # Notice a dead server (and so lost leases) within ~25 s even when idle.
                keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
            )
        return self._conn

    def _try(self, lock_id: int) -> bool:
        row = self._connection().execute(
            "SELECT pg_try_advisory_lock(%s, %s)", (self.key, lock_id)
        ).fetchone()
        return bool(row and row[0])

    def join(self) -> int:
        """Register as a live worker of the consumer; returns the member slot."""
        if self.slot is not None:
            return self.slot
        for slot in range(_MAX_MEMBERS):
            if self._try(MEMBER_BASE + slot):
                self.slot = slot
                return slot
        raise RuntimeError("too many workers")

    def members(self) -> int:
        """How many workers of this consumer are alive (at least 1: us)."""
        row = self._connection().execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s "
            "AND objsubid = 2 AND objid >= %s AND objid < %s AND granted AND " + IN_THIS_DATABASE,
            (self.key, MEMBER_BASE, MEMBER_BASE + _MAX_MEMBERS),
        ).fetchone()
        return max(1, int(row[0])) if row else 1  # type: ignore[call-overload]

    def try_acquire(self, partition: int) -> bool:
        """Take the lease of ``partition`` if it is free (or already ours)."""
        if partition in self.held:
            return True
        if self._try(partition):
            self.held.add(partition)
            return True
        return False

    def release(self, partition: int) -> None:
        if partition in self.held:
            self.held.discard(partition)
            if self._conn is not None and not self._conn.closed:
                self._conn.execute(
                    "SELECT pg_advisory_unlock(%s, %s)", (self.key, partition)
                )

    def alive(self) -> bool:
        """False if the lease connection broke: every lease is then lost."""
        if self._conn is None or self._conn.closed:
            return False
        try:
            self._conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            try:
                self._conn.close()
            finally:
                self._conn = None
            return False

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.held.clear()
        self.slot = None
