"""Snapshots of the folded event log, and compaction of the events they cover.

A **snapshot** (``take_snapshot``, ``pathkeeper snapshot take``) is the state of every
namespace as of a safe position P (every event <= P committed), stored in PostgreSQL:
one ``log_snapshots`` row and one ``log_snapshot_nodes`` row per live node, roots
included, as ``nodes`` holds them. It is computed by ``indexer.setfold`` from the previous
snapshot plus the events after it, and written by one ``INSERT ... SELECT`` inside
PostgreSQL. Replay (``indexer.replay_sources.fold_log``), ``verify``'s log check and the next
snapshot start from the newest snapshot at or below the position they want and fold
only the events after it.

**Compaction** (``compact``, ``pathkeeper compact``) deletes the events at or below the
position of a snapshot, chosen as the newest snapshot that is at least ``retain`` old
(the retention setting: events younger than that are always kept) and, unless
``force``, not past any consumer's checkpoint (a live indexer partition must still be
able to read what it has not applied). With no checkpoint at all nothing says how far
anyone has read (no indexer ever ran, or its rows were deleted), so nothing is
compacted without ``force``. It first records that position as the
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
  A reader that starts afresh starts at the horizon (``read_events(after="horizon")``,
  ``GET .../events?after=horizon``: every event still kept) or at the end of the log
  (``after="now"``). A new indexer consumer (one that never indexed anything) builds
  its index from ``nodes`` on its first start (``indexer.bootstrap``) and reads on from
  the position that index holds. A consumer behind the horizon (only possible with
  ``force``) is rebuilt by one command, ``pathkeeper replay --alias A``
  (``rebuild_command``): the rebuilt index holds every event up to the replay's final
  position, so the replay moves the consumer's checkpoints there
  (``indexer.checkpoints.advance_all``), and the worker, whose ``cursor_expired`` log
  line names that command, reads on from them;
* the individual events themselves (who renamed what, when): the snapshot keeps the
  state, not the history. ``verify``'s log check then verifies snapshot + tail, and
  trusts the snapshot as it trusted the events it was folded from.

Scheduling: either from cron (or a Kubernetes CronJob), e.g. ``17 3 * * *``, running
``pathkeeper snapshot take`` and ``pathkeeper compact``, or by the indexer worker:
``pathkeeper indexer run --snapshot-cron "17 3 * * *" [--compact-retain 7d]`` runs
``scheduled_snapshot`` on that schedule. Both are safe while the system runs (a snapshot
reads one REPEATABLE READ cut; compaction deletes only what a snapshot and every
checkpoint already cover). With several workers, each schedules the job and one takes
the snapshot: the job holds the snapshot lock, EXCLUSIVE on the empty table
``pathkeeper_locks.snapshot_lock`` (migration 0010), in a transaction kept open on a
dedicated connection for the run (it dies with its connection, so a killed worker never
blocks the next run; the transaction takes no id and no snapshot, so it holds back no
vacuum). A worker that finds the lock taken, or a snapshot younger than half the
schedule's period (another worker's run of the same tick), skips that run: logged at
WARNING with the reason (and the holder's pid) and counted
(``pathkeeper_snapshot_skipped_total{reason}``). Only a role that may write our tables
can take that lock: PUBLIC has no privilege on the lock's schema, so a role with
nothing but CONNECT cannot make every run skip (it could take the advisory lock this
used to be). A failed run is logged and counted (``pathkeeper_snapshot_failures_total``),
and the worker indexes on.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from itertools import pairwise
from typing import Any

from prometheus_client import Counter, Gauge
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from coordinator.db import LOCK_NOT_AVAILABLE, sqlstate
from coordinator.event_reader import BoundTimeout, horizon, wait_for_bound
from coordinator.indexing import DEFAULT_ALIAS, consumer_for

from . import setfold
from .errors import IndexerError
from .logs import log

#: Default retention: events younger than this are never compacted.
DEFAULT_RETAIN = timedelta(days=7)
#: Events deleted per statement when compacting (short transactions, bounded WAL bursts).
DELETE_BATCH = 50_000
#: The scheduled snapshot's lock: EXCLUSIVE on this (empty) table, one for the database,
#: since a snapshot covers every namespace and consumer.
SNAPSHOT_LOCK_TABLE = "pathkeeper_locks.snapshot_lock"

logger = logging.getLogger("pathkeeper.retention")

SNAPSHOT_POSITION = Gauge(
    "pathkeeper_snapshot_position",
    "Log position of the last snapshot this process's schedule took",
)
SNAPSHOT_SECONDS = Gauge(
    "pathkeeper_snapshot_seconds",
    "Seconds the last scheduled snapshot took (compaction included)",
)
SNAPSHOT_SKIPPED = Counter(
    "pathkeeper_snapshot_skipped",
    "Scheduled snapshots skipped, by reason: lock_held (another process holds the "
    "snapshot lock: another worker's run, or a run that does not end), recent (another "
    "worker took this tick's snapshot)",
    ["reason"],
)
SNAPSHOT_FAILURES = Counter(
    "pathkeeper_snapshot_failures",
    "Scheduled snapshots (or their compactions) that failed",
)
COMPACTION_HORIZON = Gauge(
    "pathkeeper_compaction_horizon",
    "Events at or below this position were compacted (as of the last scheduled run)",
)


class RetentionError(IndexerError):
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


#: The longest duration ``parse_duration`` accepts: "now minus it" stays a timestamp
#: PostgreSQL and Python can hold (and no retention needs more).
MAX_DURATION = timedelta(days=100 * 366)


_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
UNITS_HINT = "a number and a unit: s, m, h or d (e.g. 5s, 10m, 12h, 7d; 0 for none)"


def parse_duration(value: str) -> timedelta:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"45s"`` or ``"0"``: the unit is required (a bare
    ``5`` could be meant as days as easily as seconds)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([dhms]?)\s*", value)
    if m is None:
        raise ValueError(f"not a duration: {value!r}; expected {UNITS_HINT}")
    amount, unit = float(m.group(1)), m.group(2)
    if not unit and amount != 0:
        raise ValueError(f"{value.strip()!r} has no unit; expected {UNITS_HINT}")
    unit = unit or "s"
    seconds = amount * _UNITS[unit]
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError(f"duration {value.strip()!r} is longer than {MAX_DURATION.days}d")
    return timedelta(seconds=seconds)


def format_duration(duration: timedelta) -> str:
    """A duration as ``parse_duration`` reads it: the largest unit that divides it
    (``7d``, ``36h``, ``90s``), else seconds with their fraction."""
    seconds = duration.total_seconds()
    for unit, size in _UNITS.items():
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


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
        return horizon(conn)


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
        previous = horizon(conn)
        lowest_checkpoint = conn.execute(
            text("SELECT min(position) FROM checkpoints")
        ).scalar()
        if lowest_checkpoint is None and not force:
            # Nothing says how far anyone has read (no indexer ever ran, or its rows
            # were deleted): keep the log until one does, or until told to.
            return CompactResult(previous, previous, None, dry_run=dry_run,
                                 reason="no consumer has a checkpoint, so nothing says "
                                        "which events are still needed: nothing to compact "
                                        "(--force compacts anyway)",
                                 seconds=time.monotonic() - started)
        cap = None if force or lowest_checkpoint is None else int(lowest_checkpoint)
        # A snapshot of every namespace (a move's snapshot of one namespace is no cut),
        # and one that holds each namespace a move's snapshot below it is the base of
        # (one taken while that namespace was still being copied here does not, and
        # compacting up to it would delete that namespace's base).
        snap = conn.execute(
            text(
                "SELECT id, position FROM log_snapshots s "
                "WHERE taken_at <= now() - CAST(:retain AS interval) AND position > :prev "
                "AND (CAST(:cap AS bigint) IS NULL OR position <= CAST(:cap AS bigint)) "
                "AND s.namespace IS NULL AND NOT EXISTS ("
                "    SELECT FROM log_snapshots o JOIN namespaces n ON n.name = o.namespace "
                "    WHERE o.position < s.position AND NOT EXISTS ("
                "        SELECT FROM log_snapshot_nodes r WHERE r.snapshot_id = s.id "
                "        AND r.namespace = o.namespace AND r.parent_id IS NULL)) "
                "ORDER BY position DESC, id DESC LIMIT 1"
            ),
            {"retain": f"{retain.total_seconds()} seconds", "prev": previous, "cap": cap},
        ).first()
        conn.rollback()
    if snap is None:
        why = (f"no snapshot above the horizon ({previous}) is at least "
               f"{format_duration(retain)} old")
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


# ------------------------------------------------------------- scheduling


def rebuild_command(alias: str = DEFAULT_ALIAS, consumer: str = "") -> str:
    """The one command that rebuilds ``alias`` and moves ``consumer``'s checkpoints past
    the compaction horizon (what a consumer behind it needs)."""
    command = "pathkeeper replay"
    if alias != DEFAULT_ALIAS:
        command += f" --alias {alias}"
    if consumer and consumer != consumer_for(alias):
        command += f" --consumer {consumer}"
    return command


@dataclass
class ScheduledRun:
    """What one run of ``scheduled_snapshot`` did: ``taken``, ``skipped`` or ``failed``."""

    outcome: str
    snapshot: SnapshotInfo | None = None
    compacted: CompactResult | None = None
    reason: str = ""


@contextmanager
def snapshot_lock(engine: Engine) -> Iterator[bool]:
    """Try the scheduled snapshot's lock on a dedicated connection; yields whether we
    hold it. Held by an open transaction (no id, no snapshot), so the server releases
    it if the process dies; the session's idle-in-transaction timeout is lifted for it."""
    conn = engine.connect()
    try:
        conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
        try:
            with conn.begin_nested():
                conn.execute(text(f"LOCK TABLE {SNAPSHOT_LOCK_TABLE} IN EXCLUSIVE MODE NOWAIT"))
        except DBAPIError as exc:
            if sqlstate(exc) != LOCK_NOT_AVAILABLE:
                raise
            got = False
        else:
            got = True
        yield got
        conn.rollback()
    finally:
        # Never hand a session that might still hold the lock back to the pool.
        conn.invalidate()
        conn.close()


def snapshot_lock_holders(engine: Engine) -> str:
    """Who holds the snapshot lock now, for the log: pids with their role and
    application where this session may see them."""
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT l.pid, a.usename, a.application_name FROM pg_locks l "
            "LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'relation' AND l.granted AND l.mode = 'ExclusiveLock' "
            "AND l.relation = CAST(:table AS regclass) ORDER BY l.pid"
        ), {"table": SNAPSHOT_LOCK_TABLE}).all()
    names = []
    for pid, user, app in rows:
        detail = ", ".join(d for d in (f"role {user}" if user else "",
                                       f"application {app!r}" if app else "") if d)
        names.append(f"pid {pid}" + (f" ({detail})" if detail else ""))
    return "; ".join(names) or "none (it ended just now)"


def _newest_snapshot_age(engine: Engine) -> float | None:
    with engine.connect() as conn:
        age = conn.execute(text(
            "SELECT extract(epoch FROM now() - max(taken_at)) FROM log_snapshots "
            "WHERE namespace IS NULL"
        )).scalar()
    return None if age is None else float(age)


def scheduled_snapshot(
    engine: Engine,
    retain: timedelta | None = None,
    *,
    min_gap: timedelta = timedelta(0),
) -> ScheduledRun:
    """Take a snapshot, then compact with ``retain`` if given (never ``force``): the job
    the worker's ``--snapshot-cron`` runs. Skipped if another process holds the lock or
    a snapshot is younger than ``min_gap`` (another worker's run of the same tick). Logs
    one line per run, exports the ``pathkeeper_snapshot_*`` metrics; never raises."""
    started = time.monotonic()
    try:
        with snapshot_lock(engine) as held:
            if not held:
                return _skipped("lock_held", "another process is taking a snapshot: "
                                + snapshot_lock_holders(engine))
            age = _newest_snapshot_age(engine)
            if age is not None and age < min_gap.total_seconds():
                return _skipped("recent", f"a snapshot was taken {age:.1f} s ago")
            run = ScheduledRun("taken", snapshot=take_snapshot(engine))
            if retain is not None:
                run.compacted = compact(engine, retain)
    except Exception as exc:
        SNAPSHOT_FAILURES.inc()
        log(logger, logging.ERROR, "snapshot_failed", exc_info=True,
            error=f"{type(exc).__name__}: {exc}", seconds=round(time.monotonic() - started, 3))
        return ScheduledRun("failed", reason=str(exc))
    assert run.snapshot is not None
    seconds = time.monotonic() - started
    SNAPSHOT_POSITION.set(run.snapshot.position)
    SNAPSHOT_SECONDS.set(seconds)
    fields: dict[str, Any] = {
        "snapshot": run.snapshot.id, "position": run.snapshot.position,
        "nodes": run.snapshot.nodes, "events_folded": run.snapshot.events_folded,
        "base_snapshot": run.snapshot.base_snapshot,
    }
    if run.compacted is not None:
        COMPACTION_HORIZON.set(run.compacted.horizon)
        fields.update(horizon=run.compacted.horizon,
                      events_deleted=run.compacted.events_deleted,
                      compact_reason=run.compacted.reason or None)
    log(logger, logging.INFO, "snapshot_taken", seconds=round(seconds, 3), **fields)
    return run


def _skipped(kind: str, reason: str) -> ScheduledRun:
    SNAPSHOT_SKIPPED.labels(reason=kind).inc()
    log(logger, logging.WARNING, "snapshot_skipped", kind=kind, reason=reason)
    return ScheduledRun("skipped", reason=reason)


def schedule_gap(cron: str, lookahead: int = 16) -> timedelta:
    """Half the shortest time between two runs of the schedule (over its next
    ``lookahead`` runs): a snapshot younger than that was taken by another worker for
    the same tick (their clocks and wake-ups differ by far less), so a run skips."""
    from .verify import cron_trigger

    trigger = cron_trigger(cron)
    times: list[datetime] = []
    previous: datetime | None = None
    now = datetime.now(trigger.timezone)
    for _ in range(lookahead):
        fire = trigger.get_next_fire_time(previous, now)
        if fire is None:
            break
        times.append(fire)
        previous, now = fire, fire + timedelta(microseconds=1)
    gaps = [b - a for a, b in pairwise(times)]
    return min(gaps) / 2 if gaps else timedelta(0)


def add_snapshot_job(
    scheduler: Any, engine: Engine, cron: str, retain: timedelta | None = None,
    job_id: str = "pathkeeper-snapshot",
) -> Any:
    """Add ``scheduled_snapshot`` to an APScheduler scheduler on a crontab expression
    (``verify.cron_trigger``'s forms)."""
    from .verify import cron_trigger

    return scheduler.add_job(
        partial(scheduled_snapshot, engine, retain, min_gap=schedule_gap(cron)),
        cron_trigger(cron), id=job_id,
        max_instances=1, coalesce=True, replace_existing=True,
    )
