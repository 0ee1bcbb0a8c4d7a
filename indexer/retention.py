"""Snapshots of the folded event log, and compaction of the events they cover.

A **snapshot** (``take_snapshot``, ``pathkeeper snapshot take``) is the state of every
namespace as of a safe position P (every event <= P committed), stored in PostgreSQL:
one ``log_snapshots`` row and one ``log_snapshot_nodes`` row per live node, roots
included, as ``nodes`` holds them. It is computed by ``indexer.setfold`` from the previous
snapshot plus the events after it, and written by one ``INSERT ... SELECT`` inside
PostgreSQL. Replay (``indexer.replay.fold_log``), ``verify``'s log check and the next
snapshot start from the newest snapshot at or below the position they want and fold
only the events after it.

**Compaction** (``compact``, ``pathkeeper compact``) deletes the events at or below the
position of a snapshot, chosen as the newest snapshot that is at least ``retain`` old
(the retention setting: events younger than that are always kept) and, unless
``force``, not past any consumer's checkpoint (a live indexer partition must still be
able to read what it has not applied). It first records that position as the
*horizon* (``log_horizon``), commits, and only then deletes, in batches; snapshots
below the horizon are deleted with it (they would need deleted events).

What compaction gives up, exactly:

* the state as of a position below the horizon: ``replay --until P`` and folds as of
  P < horizon fail with ``setfold.LogCompacted`` (CLI: one line, exit 2), never a
  partial answer;
* reading the log from a cursor below the horizon: ``Coordinator.read_events`` (the
  indexer worker, ``GET .../events`` with HTTP 410 ``cursor_expired``) raises
  ``CursorExpired``. The check runs after each read, so a compaction committing
  during a read either shows in that read's check or deleted nothing it returned.
  A consumer behind the horizon (only possible with ``force``) has to be rebuilt:
  ``pathkeeper replay`` and a checkpoint moved to the horizon;
* the individual events themselves (who renamed what, when): the snapshot keeps the
  state, not the history. ``verify``'s log check then verifies snapshot + tail, and
  trusts the snapshot as it trusted the events it was folded from.

Scheduling: run ``pathkeeper snapshot take`` and ``pathkeeper compact`` from cron (or
a Kubernetes CronJob), e.g. ``17 3 * * *``; both are safe to run while the system runs
(a snapshot reads one REPEATABLE READ cut; compaction deletes only what a snapshot and
every checkpoint already cover). The indexer worker does not take snapshots itself:
its module is being reworked elsewhere, and a cron line keeps the two independent.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, text

from coordinator.eventlog import BoundTimeout, wait_for_bound

from . import setfold

#: Default retention: events younger than this are never compacted.
DEFAULT_RETAIN = timedelta(days=7)
#: Events deleted per statement when compacting (short transactions, bounded WAL bursts).
DELETE_BATCH = 50_000


class RetentionError(Exception):
    """A snapshot or compaction could not be done (the message says why)."""


@dataclass(frozen=True)
class SnapshotInfo:
    id: int
    position: int
    taken_at: datetime
    namespaces: int
    nodes: int
    anomalies: int
    base_snapshot: int | None = None
    events_folded: int = 0
    seconds: float = 0.0


@dataclass
class CompactResult:
    horizon: int
    previous_horizon: int
    snapshot_id: int | None
    events_deleted: int = 0
    snapshots_deleted: int = 0
    dry_run: bool = False
    reason: str = ""
    seconds: float = 0.0


def parse_duration(value: str) -> timedelta:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"45s"``, ``"0"`` (or a number of seconds)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([dhms]?)\s*", value)
    if m is None:
        raise ValueError(f"not a duration: {value!r} (e.g. 7d, 12h, 30m, 0)")
    amount, unit = float(m.group(1)), m.group(2) or "s"
    return timedelta(seconds=amount * {"d": 86400, "h": 3600, "m": 60, "s": 1}[unit])


def take_snapshot(
    engine: Engine, position: int | None = None, *, wait: float = 30.0
) -> SnapshotInfo:
    """Store the state of every namespace as of ``position`` (default: the current safe
    end of the log; a later ``position`` is lowered to it)."""
    started = time.monotonic()
    try:
        bound = wait_for_bound(engine, wait)
    except BoundTimeout as exc:
        raise RetentionError(f"cannot pick a safe position of the event log: {exc}") from exc
    at = bound if position is None else min(position, bound)
    try:
        folded = setfold.fold(engine, until=at)
    except setfold.LogCompacted as exc:
        raise RetentionError(str(exc)) from exc
    with folded:
        conn = folded.conn
        row = conn.execute(
            text(
                "INSERT INTO log_snapshots (position, namespaces, nodes, anomalies) "
                "VALUES (:p, :ns, :n, :a) RETURNING id, taken_at"
            ),
            {"p": at, "ns": len(folded.namespaces()), "n": folded.node_count(),
             "a": folded.anomalies.count},
        ).one()
        # Copied inside PostgreSQL, from the fold's temporary table: no row through Python.
        conn.execute(
            text(
                "INSERT INTO log_snapshot_nodes (snapshot_id, namespace, id, parent_id, name, "
                "kind, content, metadata, version) SELECT :sid, namespace, id, parent_id, "
                f"name, kind, content, metadata, version FROM {folded.tables['nodes']}"
            ),
            {"sid": row.id},
        )
        conn.commit()
        return SnapshotInfo(
            id=int(row.id), position=at, taken_at=row.taken_at,
            namespaces=len(folded.namespaces()), nodes=folded.node_count(),
            anomalies=folded.anomalies.count, base_snapshot=folded.base.snapshot_id,
            events_folded=folded.events, seconds=time.monotonic() - started,
        )


def list_snapshots(engine: Engine) -> list[SnapshotInfo]:
    """Every stored snapshot, oldest first."""
    with engine.connect() as conn:
        return [
            SnapshotInfo(int(r.id), int(r.position), r.taken_at, int(r.namespaces),
                         int(r.nodes), int(r.anomalies))
            for r in conn.execute(text(
                "SELECT id, position, taken_at, namespaces, nodes, anomalies "
                "FROM log_snapshots ORDER BY position, id"
            ))
        ]


def current_horizon(engine: Engine) -> int:
    """Events at or below this position were compacted away (0: the log is whole)."""
    with engine.connect() as conn:
        return setfold.horizon(conn)


def compact(
    engine: Engine,
    retain: timedelta = DEFAULT_RETAIN,
    *,
    force: bool = False,
    dry_run: bool = False,
) -> CompactResult:
    """Delete the events covered by the newest snapshot that is at least ``retain`` old
    and (unless ``force``) at or below every consumer's checkpoint. See the module
    docstring for what this gives up."""
    started = time.monotonic()
    with engine.connect() as conn:
        previous = setfold.horizon(conn)
        lowest_checkpoint = conn.execute(
            text("SELECT min(position) FROM checkpoints")
        ).scalar()
        cap = None if force or lowest_checkpoint is None else int(lowest_checkpoint)
        snap = conn.execute(
            text(
                "SELECT id, position FROM log_snapshots "
                "WHERE taken_at <= now() - CAST(:retain AS interval) AND position > :prev "
                "AND (CAST(:cap AS bigint) IS NULL OR position <= CAST(:cap AS bigint)) "
                "ORDER BY position DESC, id DESC LIMIT 1"
            ),
            {"retain": f"{retain.total_seconds()} seconds", "prev": previous, "cap": cap},
        ).first()
        conn.rollback()
    if snap is None:
        why = f"no snapshot above the horizon ({previous}) is at least {retain} old"
        if cap is not None:
            why += f" and at or below the lowest consumer checkpoint ({cap})"
        return CompactResult(previous, previous, None, dry_run=dry_run,
                             reason=why + ": nothing to compact",
                             seconds=time.monotonic() - started)
    cut = int(snap.position)
    result = CompactResult(cut, previous, int(snap.id), dry_run=dry_run)
    if dry_run:
        with engine.connect() as conn:
            result.events_deleted = int(conn.execute(
                text("SELECT count(*) FROM events WHERE position <= :cut"), {"cut": cut}
            ).scalar_one())
        result.seconds = time.monotonic() - started
        return result
    # 1. The horizon first, committed: from now on readers below it get an error, even
    # though the events are still there; never events with a hole in them.
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO log_horizon (id, position, snapshot_id) VALUES (1, :cut, :sid) "
                "ON CONFLICT (id) DO UPDATE SET position = EXCLUDED.position, "
                "snapshot_id = EXCLUDED.snapshot_id, compacted_at = now() "
                "WHERE log_horizon.position < EXCLUDED.position"
            ),
            {"cut": cut, "sid": snap.id},
        )
        result.snapshots_deleted = conn.execute(
            text("DELETE FROM log_snapshots WHERE position < :cut"), {"cut": cut}
        ).rowcount
    # 2. Then the events, in batches by position (the ix_events_position index).
    while True:
        with engine.begin() as conn:
            deleted = conn.execute(
                text(
                    "DELETE FROM events WHERE position IN (SELECT position FROM events "
                    "WHERE position <= :cut ORDER BY position LIMIT :n)"
                ),
                {"cut": cut, "n": DELETE_BATCH},
            ).rowcount
        result.events_deleted += deleted
        if deleted < DELETE_BATCH:
            break
    result.seconds = time.monotonic() - started
    return result
