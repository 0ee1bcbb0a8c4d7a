"""Per-partition checkpoints of an indexer consumer, in the ``checkpoints`` table.

A consumer with ``N`` partitions has exactly the rows ``0 .. N-1``; a checkpoint
only ever moves forward (``GREATEST``), so even two workers that briefly hold the
same partition (a lease lost in a network split) cannot move it back. Each write
sends ``NOTIFY pathkeeper_indexed`` (see ``coordinator.indexing``).
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine, text

from coordinator.indexing import INDEXED_CHANNEL

from .errors import IndexerError
from .leases import IN_THIS_DATABASE, consumer_key


class LayoutMismatch(IndexerError):
    """The consumer's checkpoints were written with another partition count, and
    another worker still runs with it."""


def ensure_layout(engine: Engine, consumer: str, partitions: int) -> None:
    """Make the consumer's checkpoint rows exactly ``0 .. partitions-1``.

    A new consumer starts at position 0 (the beginning of the log). A change of
    partition count restarts every partition at the smallest old checkpoint: that
    re-applies some events, which is harmless (writes are idempotent), and loses
    none. Refused while another worker holds a lease of this consumer.
    """
    key = consumer_key(consumer)
    with engine.begin() as conn:
        # Serialize layout changes of one consumer (transaction-scoped lock).
        conn.execute(text("SELECT pg_advisory_xact_lock(:k, -1)"), {"k": key})
        rows = conn.execute(
            text("SELECT partition, position FROM checkpoints WHERE consumer = :c"),
            {"c": consumer},
        ).all()
        have = {int(r.partition): int(r.position) for r in rows}
        if set(have) == set(range(partitions)):
            return
        start = min(have.values()) if have else 0
        if have:
            busy = conn.execute(
                text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                    "AND classid = :k AND objsubid = 2 AND objid < 1000000 "
                    "AND granted AND pid <> pg_backend_pid() AND " + IN_THIS_DATABASE
                ),
                {"k": key},
            ).scalar_one()
            if busy:
                raise LayoutMismatch(
                    f"consumer {consumer!r} runs with {len(have)} partitions elsewhere; "
                    f"stop those workers or use --partitions {len(have)}"
                )
        conn.execute(text("DELETE FROM checkpoints WHERE consumer = :c"), {"c": consumer})
        for p in range(partitions):
            conn.execute(
                text(
                    "INSERT INTO checkpoints (consumer, partition, position) "
                    "VALUES (:c, :p, :pos)"
                ),
                {"c": consumer, "p": p, "pos": start},
            )


def load(conn: Connection, consumer: str, partition: int) -> int:
    """The partition's checkpoint (0 if it has none)."""
    pos = conn.execute(
        text("SELECT position FROM checkpoints WHERE consumer = :c AND partition = :p"),
        {"c": consumer, "p": partition},
    ).scalar_one_or_none()
    return int(pos) if pos is not None else 0


def save(engine: Engine, consumer: str, partition: int, position: int) -> None:
    """Move the partition's checkpoint forward to ``position`` (never back) and notify
    waiters."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO checkpoints (consumer, partition, position, updated_at) "
                "VALUES (:c, :p, :pos, now()) "
                "ON CONFLICT (consumer, partition) DO UPDATE SET "
                "position = GREATEST(checkpoints.position, EXCLUDED.position), "
                "updated_at = now()"
            ),
            {"c": consumer, "p": partition, "pos": position},
        )
        conn.execute(text("SELECT pg_notify(:ch, :c)"), {"ch": INDEXED_CHANNEL, "c": consumer})


def load_all(conn: Connection, consumer: str) -> dict[int, int]:
    """Every partition's checkpoint of ``consumer``."""
    rows = conn.execute(
        text("SELECT partition, position FROM checkpoints WHERE consumer = :c ORDER BY partition"),
        {"c": consumer},
    ).all()
    return {int(r.partition): int(r.position) for r in rows}


def advance_all(engine: Engine, consumer: str, position: int) -> int:
    """Move every partition's checkpoint of ``consumer`` forward to ``position`` (never
    back) and notify waiters; returns how many moved. For a rebuild whose index holds
    every event up to ``position``: the consumer reads on from there, which is what
    lets a consumer behind the compaction horizon resume. A consumer that never ran has
    no rows and is left alone."""
    with engine.begin() as conn:
        moved = conn.execute(
            text(
                "UPDATE checkpoints SET position = :pos, updated_at = now() "
                "WHERE consumer = :c AND position < :pos"
            ),
            {"c": consumer, "pos": position},
        ).rowcount
        if moved:
            conn.execute(text("SELECT pg_notify(:ch, :c)"),
                         {"ch": INDEXED_CHANNEL, "c": consumer})
    return int(moved)
