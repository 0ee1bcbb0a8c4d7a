"""The event log's reading side: events read back in a gap-safe order, never past a
position that a transaction still running may yet fill. The writing side
(``coordinator.event_appender``) takes one block of positions per transaction, in its
last statement, after taking the *position lock*; how, and why, is in its docstring.

* Reading (``read_events``), in autocommit, each step a separate statement:
  1. read the sequence's ``last_value`` L. Every position ``<= L + BLOCK - 1``
     belongs to a block handed out before this moment;
  2. list the holders of the position lock in this database, from ``pg_locks``:
     their virtual transaction ids and the transaction ids they hold (one read of
     ``pg_locks``). Every transaction that holds such a block took the lock, and
     had its id, before its ``nextval``, so before step 1: it either ended before
     step 2 (committed: visible to any later statement; aborted: never visible),
     or is listed, with its id. (The lock is recorded before ``nextval`` changes
     the sequence's page, and ``pg_locks`` reads it under the same kind of locks:
     a reader that saw the new value in step 1 sees the lock in step 2. ROW SHARE
     is a weak relation lock, usually recorded in the writer's own fast-path
     slots rather than in the shared lock table; ``pg_locks`` reads those too,
     each backend's under the lightweight lock the writer took to record it);
  3. wait until every listed transaction has ended: until none of them holds the
     position lock under its virtual id nor any of its transaction ids. Either
     goes away only at the end of the transaction, after its commit became
     visible (PostgreSQL releases locks after it marks the transaction committed
     in the proc array). Two marks, because each covers a case the other does not:
     a prepared transaction keeps its transaction id (and its locks), but its
     virtual id is not promised to survive PREPARE; the virtual id would still
     cover a holder whose transaction id were not assigned yet (the writer's step
     (a) makes that impossible, but the reader does not depend on it);
  4. now no position ``<= L + BLOCK - 1`` can ever appear again: read up to it.
  The cursor handed back is that bound (or the end of the last block read, when
  ``limit`` cut the read short), so blocks are never split between reads: a
  reader sees a transaction's events all at once or not at all.

Who is waited for, and who is not. The reader waits only for writers of this
database that took the position lock, i.e. for transactions in their last
statement or between it and their COMMIT (less imports of namespaces it does not
read, see "Imports" above); plus, harmlessly, writers that took it
after step 1 (their blocks are above L; waiting for them is conservative). It does
not wait for: transactions of other databases of the same server, transactions of
this database on other tables (or on ours, before their last statement), prepared
(two-phase) transactions that are not ours, nor the readers' own snapshots. Each
of those either never takes the position lock, so never holds a block, or will take
it after step 1 and so gets a block above L. Waiting for every transaction id on
the server (what an earlier version did) was safe but let any application sharing
the server stall indexing for as long as it kept a transaction open.

The cost is on the reader: it waits for writers that were in flight when it looked;
that window is one statement and a commit, unless a client keeps a transaction
open after its events were written. A writer that never ends is ended by
``idle_in_transaction_session_timeout``; until then ``wait_for_bound`` names it
(pid, database, age) when it gives up, and ``on_slow`` reports it while waiting.
Holes (rolled back blocks, unused parts of a block) are normal and never waited for.

Why not a snapshot's in-progress list (``pg_snapshot_xip``): a snapshot's xmax is
one past the latest *completed* transaction id, and running transactions with an
id at or above it are not listed. A writer that got its id after the last commit
would be missed, and the reader would move past its block (the test
``test_open_transaction_with_the_newest_id_is_not_skipped`` caught exactly this).

What position order promises: transactions that touch the same rows are in commit
order (a transaction takes its block after all its lock waits, and holds its row
locks until commit), and a transaction that read another's committed change comes
after it. Transactions on unrelated rows are in an arbitrary but fixed order. A
change that read an ancestor's old name while a rename of that ancestor was in
flight may carry the old path in its payload at a later position than the rename:
consumers must derive paths from ids (``parent_id``, ``name``) or from ``nodes``;
payload paths are as the writer resolved them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, Engine, text

from .db import Driver, driver_sql
from .errors import CursorAhead, CursorExpired, InvalidArgument, Unavailable
from .event_appender import IMPORT_MARK_CLASS
from .results import POSITION_BLOCK, Event, Start, block_end


@dataclass(frozen=True)
class Partition:
    """Namespaces are split into ``count`` partitions by a stable hash of their name."""

    index: int
    count: int

    SQL = "mod(hashtext(namespace)::bigint & 2147483647, :p_count) = :p_index"


#: The events of this server's log that its consumers apply (the worker, replay's tail,
#: folds, snapshots, verify's log check): not those of a namespace a move is copying here
#: (``incoming``: its rows are not this server's yet) or moved away from here (``gone``:
#: every event it had here was indexed before the move's flip, and the leftovers are being
#: deleted), nor a moved-in namespace's copied events (at or below its ``log_from``:
#: written, and indexed, on the server it came from). docs/sharding.md, section 2. A
#: condition on a row of ``events`` named ``{e}``, in the statement that reads the events
#: (so one snapshot sees the placement and the events: a namespace's first event here
#: is visible only with the flip that made it ``active``). The placements are read once
#: per statement, as a map from namespace to the position its events start after (an
#: uncorrelated subquery: one InitPlan), never per event: a correlated anti-join made the
#: planner pick other plans for wide ranges, 8x slower reads of a full batch (measured).
#: The table is empty outside moves: the map is NULL and each row costs one lookup in it.
_MOVED_MAP = (
    "(SELECT jsonb_object_agg(p.namespace, CASE WHEN p.state IN ({skipped}) "
    "THEN 9223372036854775807 ELSE p.log_from END) FROM namespace_placement p "
    "WHERE p.state IN ({skipped}) OR p.log_from > 0)"
)
OWNED_EVENT_SQL = (
    "{e}.position > coalesce(CAST("
    + _MOVED_MAP.format(skipped="'incoming', 'gone'").replace("{", "{{").replace("}", "}}")
    + " ->> {e}.namespace AS bigint), 0)"
)
#: The change feed's version: a moved-in namespace's copied events are its history, which
#: a cursor handed out by the server it came from reads on (section 3, "feed"); only a
#: namespace still being copied here is left out.
COPIED_EVENT_SQL = (
    "{e}.position > coalesce(CAST("
    + _MOVED_MAP.replace("WHERE p.state IN ({skipped}) OR p.log_from > 0",
                         "WHERE p.state IN ({skipped})")
    .format(skipped="'incoming'").replace("{", "{{").replace("}", "}}")
    + " ->> {e}.namespace AS bigint), 0)"
)
#: Namespaces whose rows a reader of ``nodes`` that no event drives (reindex's load,
#: verify's scan) leaves out: a condition on a namespace's name ``{ns}``.
OWNED_NAMESPACE_SQL = (
    "NOT EXISTS (SELECT 1 FROM namespace_placement p WHERE p.namespace = {ns} "
    "AND p.state IN ('incoming', 'gone'))"
)
#: For a change-feed read of namespaces that are all frozen or gone here: the highest of
#: their ``frozen_at`` (every position they got here is at or below it), else NULL.
_FEED_CLAMP_SQL = text(
    "SELECT CASE WHEN count(*) = cardinality(CAST(:nss AS text[])) THEN max(frozen_at) END "
    "FROM namespace_placement WHERE namespace = ANY(CAST(:nss AS text[])) "
    "AND state IN ('frozen', 'gone')"
)


def notified_partitions(payload: str | None, count: int) -> set[int] | None:
    """The partitions (of ``count``) a ``pathkeeper_events`` notification concerns.

    A writing transaction's notification carries ``hashtext(namespace) & 0x7fffffff``
    of each namespace it wrote, comma-separated: the hash ``Partition.SQL`` takes
    modulo the partition count, so a consumer with any partition count can tell
    which of its partitions to wake. None (wake every partition) for an empty or
    unreadable payload: a notification without one (an older writer, a test
    helper) still wakes everyone, as before."""
    if not payload:
        return None
    try:
        return {int(h) % count for h in payload.split(",")}
    except ValueError:
        return None


# The lock table's oid, found through the catalogs: a session that may read the log but
# has no USAGE on the lock's schema (a monitoring role) can still list its holders.
_LOCK_TABLE_OID = (
    "(SELECT c.oid FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace "
    "WHERE s.nspname = 'pathkeeper_locks' AND c.relname = 'position_lock')"
)

# Rows of pg_locks that are a writer's hold on the position lock, in this database.
_IS_POSITION_LOCK = (
    "locktype = 'relation' AND granted AND mode = 'RowShareLock' "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    f"AND relation = {_LOCK_TABLE_OID}"
)
_IS_XID_LOCK = "locktype = 'transactionid' AND mode = 'ExclusiveLock' AND granted"

_IS_IMPORT_MARK = (
    "locktype = 'advisory' AND granted AND mode = 'ShareLock' AND objsubid = 2 "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    f"AND classid = {IMPORT_MARK_CLASS}"
)
# A namespace hash (objid of a mark) the reader reads: in :nss (if given) and in the
# partition :p_index of :p_count (if given).
_IN_SCOPE = (
    "(CAST(:nss AS text[]) IS NULL OR CAST(m.objid AS bigint) IN ("
    "SELECT hashtext(n)::bigint & 2147483647 FROM unnest(CAST(:nss AS text[])) AS n)) "
    "AND (CAST(:p_count AS integer) IS NULL "
    "OR mod(CAST(m.objid AS bigint), CAST(:p_count AS integer)) = CAST(:p_index AS integer))"
)

# Step 2: the writers holding the position lock now, by virtual transaction id, and the
# transaction ids they hold; without those marked as importing only namespaces the reader
# does not read (:everything false). One read of pg_locks (MATERIALIZED: pg_locks is a
# function call, and two calls would be two different moments).
HOLDERS_SQL = text(
    f"""
    WITH l AS MATERIALIZED (
        SELECT locktype, database, relation, classid, objid, objsubid, transactionid,
               virtualtransaction, mode, granted
        FROM pg_locks
    ), holders AS (
        SELECT DISTINCT virtualtransaction FROM l WHERE {_IS_POSITION_LOCK}
    ), waited AS (
        SELECT h.virtualtransaction FROM holders h
        WHERE CAST(:everything AS boolean)
           OR NOT EXISTS (SELECT FROM l m WHERE m.virtualtransaction = h.virtualtransaction
                          AND {_IS_IMPORT_MARK})
           OR EXISTS (SELECT FROM l m WHERE m.virtualtransaction = h.virtualtransaction
                      AND {_IS_IMPORT_MARK} AND {_IN_SCOPE})
    )
    SELECT array_agg(DISTINCT w.virtualtransaction) AS vxids,
           array_agg(DISTINCT CAST(x.transactionid AS text))
               FILTER (WHERE x.transactionid IS NOT NULL) AS xids
    FROM waited w
    LEFT JOIN l x ON x.virtualtransaction = w.virtualtransaction AND x.{_IS_XID_LOCK}
    """
)

# Step 3: is any of them still running? A writer counts as running while it still holds
# the position lock under its virtual transaction id, or any of its transaction ids.
STILL_RUNNING_SQL = text(
    f"""
    SELECT EXISTS (
        SELECT FROM pg_locks
        WHERE ({_IS_POSITION_LOCK}
               AND virtualtransaction = ANY(CAST(:vxids AS text[])))
           OR ({_IS_XID_LOCK}
               AND CAST(transactionid AS text) = ANY(CAST(:xids AS text[])))
    )
    """
)

# Who they are, for operators: the same rows, with the session (or prepared transaction).
# With :all, every current holder of the position lock instead.
WRITERS_SQL = text(
    f"""
    WITH l AS MATERIALIZED (
        SELECT locktype, transactionid, virtualtransaction, pid FROM pg_locks
        WHERE (CAST(:all AS boolean) AND {_IS_POSITION_LOCK})
           OR ({_IS_POSITION_LOCK} AND virtualtransaction = ANY(CAST(:vxids AS text[])))
           OR ({_IS_XID_LOCK} AND CAST(transactionid AS text) = ANY(CAST(:xids AS text[])))
    )
    SELECT DISTINCT ON (l.virtualtransaction)
           l.pid, coalesce(a.datname, p.database, current_database()) AS database,
           EXTRACT(EPOCH FROM clock_timestamp() - coalesce(a.xact_start, p.prepared)) AS age,
           a.state, a.application_name, p.gid
    FROM l
    LEFT JOIN pg_stat_activity a ON a.pid = l.pid
    LEFT JOIN pg_prepared_xacts p ON p.transaction = l.transactionid
    ORDER BY l.virtualtransaction, p.gid NULLS LAST, l.pid NULLS LAST
    """
)

#: After how many seconds of waiting ``safe_bound`` reports whom it waits for (``on_slow``).
REPORT_AFTER = 3.0
#: A wait for writers in flight this short (seconds) looks again every ``_SHORT_WAIT_POLL``
#: at most (``_bound_and_ahead``); a longer one backs off.
_SHORT_WAIT = 0.05
_SHORT_WAIT_POLL = 0.002


@dataclass(frozen=True)
class WriterInFlight:
    """A transaction that holds (or may hold) positions the reader cannot pass yet."""

    pid: int | None  # None: a prepared transaction (``gid``)
    database: str
    age: float | None  # seconds since its transaction began (None: not visible to us)
    state: str | None = None
    application_name: str | None = None
    gid: str | None = None

    def __str__(self) -> str:
        who = f"pid {self.pid}" if self.pid is not None else f"prepared transaction {self.gid!r}"
        detail = [f"open {self.age:.1f} s" if self.age is not None else "age unknown"]
        if self.state:
            detail.append(self.state)
        if self.application_name:
            detail.append(f"application {self.application_name!r}")
        return f"{who} in database {self.database} ({', '.join(detail)})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid, "database": self.database,
            "age": None if self.age is None else round(self.age, 3), "state": self.state,
            "application_name": self.application_name, "gid": self.gid,
        }


class BoundTimeout(Unavailable):
    """The reader gave up waiting for writers in flight; ``writers`` names them."""

    def __init__(self, waited: float, writers: Sequence[WriterInFlight]) -> None:
        self.waited = waited
        self.writers = list(writers)
        names = "; ".join(str(w) for w in self.writers)
        super().__init__(
            f"event log writers still in flight after {waited:.1f} s: {names} "
            "(a transaction holding a block of event positions; it ends at commit or "
            "rollback, or at idle_in_transaction_session_timeout)"
        )


def _writers(
    conn: Connection, vxids: Sequence[str] = (), xids: Sequence[str] = (), *, every: bool = False
) -> list[WriterInFlight]:
    rows = conn.execute(WRITERS_SQL, {"all": every, "vxids": list(vxids), "xids": list(xids)})
    out = [
        WriterInFlight(
            pid=None if r.pid is None else int(r.pid), database=str(r.database),
            age=None if r.age is None else float(r.age), state=r.state,
            application_name=r.application_name or None, gid=r.gid,
        )
        for r in rows
    ]
    return sorted(out, key=lambda w: -(w.age or 0.0))


def writers_in_flight(engine: Engine) -> list[WriterInFlight]:
    """Every writer of this database that holds a block of positions now (oldest first):
    what a log reader started now would wait for."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        return _writers(conn, every=True)


#: Step 1, and the bound made durable on the synchronous standbys: see docs/failover.md.
#: With the isolation of the transaction it runs in: a statement read ahead in the
#: same pipeline is used only under READ COMMITTED (``_bound_and_ahead``).
LAST_VALUE_SQL = text(
    "SELECT last_value, is_called, CASE WHEN current_setting('synchronous_standby_names')"
    " <> '' THEN pg_logical_emit_message(true, 'pathkeeper', 'bound') END,"
    " current_setting('transaction_isolation') FROM event_position_seq"
)
#: ``driver_sql`` of the few statements a reader builds (one per kind of read).
_compiled = lru_cache(maxsize=64)(driver_sql)
# Steps 1 and 2 as the driver takes them, for their pipeline.
_LAST_VALUE = driver_sql(LAST_VALUE_SQL)
_HOLDERS = driver_sql(HOLDERS_SQL)


def wait_for_bound(
    engine: Engine,
    wait: float = 5.0,
    *,
    namespaces: Sequence[str] | None = None,
    partition: Partition | None = None,
    on_slow: Callable[[list[WriterInFlight]], None] | None = None,
    report_after: float = REPORT_AFTER,
) -> int:
    """The highest position below which no event can still appear (steps 1-4 of the
    module docstring). Waits up to ``wait`` seconds for writers in flight, then raises
    ``BoundTimeout`` naming them. ``on_slow`` is called once, with the writers still
    waited for, when the wait has lasted ``report_after`` seconds.

    With ``namespaces`` and/or ``partition``, the bound holds for the events of those
    namespaces (of that partition) only: an import marked with a namespace outside them
    may still commit events below it. Only a reader that reads that scope may use it."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        return _bound_and_ahead(conn, wait, namespaces=namespaces, partition=partition,
                                on_slow=on_slow, report_after=report_after)[0]


def _bound_and_ahead(
    conn: Connection,
    wait: float,
    *,
    namespaces: Sequence[str] | None,
    partition: Partition | None,
    on_slow: Callable[[list[WriterInFlight]], None] | None,
    report_after: float,
    ahead: tuple[str, Mapping[str, Any]] | None = None,
) -> tuple[int, list[Any] | None]:
    """``wait_for_bound`` on ``conn``, which must be in autocommit: each step a
    statement of its own (the order of steps 1 and 2 is what the argument rests on).

    Steps 1 and 2 go to the server together (a pipeline: one round trip, where two cost
    a lone change's read a millisecond more on an idle machine): the server still runs
    them one after another, in the order sent, each statement reading the sequence and
    the lock table as they are when it runs, so the list is still taken after the read
    of the sequence ended. Neither reads through a snapshot; the one implicit
    transaction around both (one Sync) changes nothing they see. With synchronous
    standbys the bound's WAL message commits at that Sync, and the pipeline returns
    only once the server has answered it: durable before it is used, as before.

    Returns the bound, and the rows of ``ahead`` (a statement and its parameters, sent
    behind steps 1 and 2 in the same round trip) when they may be used: the server ran
    it after step 2 ended, so in READ COMMITTED its snapshot sees every writer step 2
    did not list as ended, and with none listed, every event up to the bound is in it.
    None when step 2 listed writers (the caller waits for them and reads again), or
    when the pipeline's transaction was not READ COMMITTED (a database whose default
    isolation is higher runs the pipeline's statements under one snapshot, taken by
    step 1: the caller reads again, in a transaction of its own)."""
    driver = Driver(conn)
    with driver.pipeline():
        last = driver.send(_LAST_VALUE, {})
        held = driver.send(_HOLDERS, {
            "everything": namespaces is None and partition is None,
            "nss": None if namespaces is None else list(namespaces),
            "p_count": None if partition is None else partition.count,
            "p_index": None if partition is None else partition.index,
        })
        rows_ahead = None if ahead is None else driver.send(*ahead)
    last_value, is_called, _, isolation = last.fetchone() or (0, False, None, None)
    vxids, xids = held.fetchone() or (None, None)
    if not is_called:
        return 0, None
    bound = int(last_value) + POSITION_BLOCK - 1
    if not vxids:
        if rows_ahead is None or isolation != "read committed":
            return bound, None
        return bound, rows_ahead.fetchall()
    holders, ids = list(vxids), list(xids or [])
    params = {"vxids": holders, "xids": ids}
    started = time.monotonic()
    deadline = started + wait
    report_at = started + report_after if on_slow is not None else math.inf
    delay = 0.0005
    while conn.execute(STILL_RUNNING_SQL, params).scalar_one():
        now = time.monotonic()
        if now >= report_at:
            report_at = math.inf
            writers = _writers(conn, holders, ids)
            if writers and on_slow is not None:
                on_slow(writers)
        if now >= deadline:
            writers = _writers(conn, holders, ids)
            if not writers:  # they ended just now
                break
            raise BoundTimeout(now - started, writers)
        time.sleep(delay)
        # Most waits are for a writer's last statement and COMMIT, a few ms: look again
        # within ``_SHORT_WAIT_POLL`` while the wait is that short, or the wait ends up
        # to twice as late as the writer (checks at 0.5, 1.5, 3.5, 7.5, 15.5 ms...). A
        # long one (a writer idle in its transaction) backs off to 20 ms, so its reads of
        # pg_locks do not take the server's CPU.
        short = now - started < _SHORT_WAIT
        delay = min(delay * 2, _SHORT_WAIT_POLL if short else 0.02)
    return bound, None


def safe_bound(
    engine: Engine,
    wait: float = 5.0,
    *,
    namespaces: Sequence[str] | None = None,
    partition: Partition | None = None,
    on_slow: Callable[[list[WriterInFlight]], None] | None = None,
    report_after: float = REPORT_AFTER,
) -> int | None:
    """``wait_for_bound``, or None on timeout."""
    try:
        return wait_for_bound(engine, wait, namespaces=namespaces, partition=partition,
                              on_slow=on_slow, report_after=report_after)
    except BoundTimeout:
        return None


HORIZON_SQL = text("SELECT position FROM log_horizon WHERE id = 1")
#: The end of the newest block handed out (0: none yet); no cursor a reader of this log
#: handed out is above it, whether or not that block's writer has committed.
END_SQL = text(
    f"SELECT CASE WHEN is_called THEN last_value + {POSITION_BLOCK - 1} ELSE 0 END "
    "FROM event_position_seq"
)

def horizon(conn: Connection) -> int:
    """Events at or below this position were deleted by compaction (0: none were)."""
    got = conn.execute(HORIZON_SQL).scalar()
    return 0 if got is None else int(got)


def check_horizon(conn: Connection, cursor: int) -> None:
    """Raise ``CursorExpired`` if compaction deleted events after ``cursor`` (see
    ``indexer.retention``): a reader must never skip them silently."""
    oldest = horizon(conn)
    if cursor < oldest:
        raise CursorExpired(cursor, oldest)


def check_not_ahead_of(cursor: int, end: int) -> None:
    """Raise ``CursorAhead`` if ``cursor`` is past ``end``, an end of the log read now: no
    reader of this log handed it out, and reading on from it would skip every event up
    to it (after a restore that took the log back, events the client never saw get
    positions below its cursor)."""
    if cursor > end:
        raise CursorAhead(cursor, end)


def check_not_ahead(conn: Connection, cursor: int) -> None:
    """``check_not_ahead_of`` the end of the newest block handed out (no waiting)."""
    check_not_ahead_of(cursor, int(conn.execute(END_SQL).scalar_one()))


def _clamped(conn: Connection, namespaces: Sequence[str], cursor: int, next_cursor: int) -> int:
    """``next_cursor``, lowered to the ``frozen_at`` of ``namespaces`` if they are all
    frozen or gone here (never below ``cursor``: a cursor does not go back)."""
    clamp = conn.execute(_FEED_CLAMP_SQL, {"nss": list(namespaces)}).scalar()
    return next_cursor if clamp is None else max(cursor, min(next_cursor, int(clamp)))


# The payload with its file content, if it has one, read as null (every event that
# carries a content allows null there: a directory's).
_WITHOUT_CONTENT = (
    "CASE WHEN payload ? 'content' THEN jsonb_set(payload, '{content}', 'null') "
    "ELSE payload END"
)
# No payload at all for events of the types in :bare (read back as an empty object).
_BARE = "CASE WHEN type = ANY(CAST(:bare AS text[])) THEN NULL ELSE {payload} END"


def read_events(
    engine: Engine,
    after: int | Start | None = None,
    limit: int = 1000,
    *,
    namespaces: Sequence[str] | None = None,
    partition: Partition | None = None,
    until: int | None = None,
    wait: float = 5.0,
    on_slow: Callable[[list[WriterInFlight]], None] | None = None,
    report_after: float = REPORT_AFTER,
    contents: bool = True,
    bare_types: Collection[str] = (),
    copied: bool = False,
    read_ahead: bool = False,
    timings: dict[str, float] | None = None,
) -> tuple[list[Event], int]:
    """Events after ``after`` that are safe to consume, in position order, and the next cursor.

    Whole transactions only: the batch may exceed ``limit`` to finish the last
    transaction it started. ``until`` caps the positions read (for replays as of
    a past position). Waits up to ``wait`` seconds for writers in flight (then returns
    no events and the same cursor); ``on_slow`` as in ``wait_for_bound``. With
    ``namespaces`` or ``partition`` it does not wait for imports of other namespaces,
    so the cursor it returns is a cursor for those namespaces (that partition) only. A
    cursor below the compaction horizon raises ``CursorExpired`` (``indexer.retention``),
    one past the end of the log ``CursorAhead``. ``after`` may also be a ``Start``:
    ``"horizon"`` reads from the oldest event kept, ``"now"`` returns no events and the
    end of the log as it is now (every transaction that could still commit below it has
    ended; if one does not end within ``wait``, ``Unavailable``).

    ``contents=False`` reads every payload's ``content`` as null, for readers that only
    plan from the events (the indexer reads nodes from PostgreSQL): an import's
    transaction is one batch of up to a whole block, 65,536 files' contents otherwise.
    ``bare_types``: event types whose payload is not read at all (not sent by the server,
    not decoded; ``payload`` is an empty object), for a reader that handles them from
    their type and node id alone (the indexer's plan: most events of a load).

    Namespaces moved between servers (docs/sharding.md): by default the events this
    server's consumers apply (``OWNED_EVENT_SQL``). ``copied=True`` is the change feed's
    read (``COPIED_EVENT_SQL``): a moved-in namespace's copied events too; and, for
    ``namespaces`` that are all frozen or gone here, the cursor returned stops at their
    ``frozen_at`` (they have no event above it here, and a cursor past it could be past
    the end of the log of the server they moved to).

    ``read_ahead=True`` sends the select with the bound's steps, in their round trip,
    and uses its rows if no writer was in flight (one round trip for the whole read
    instead of two): for a reader that expects little (a lone change's wake-up). When
    writers were in flight the select was wasted, and is sent again after the wait:
    a reader of a busy log should not ask for it.

    ``timings`` (if given) gets ``bound``: the seconds spent finding the safe bound
    (steps 1-3 of the module docstring, waits included), and ``read_ahead``: 1 if the
    rows read ahead were used, for a caller that reports where its time goes.
    """
    # A batch must be able to hold one event, or a reader would never move on.
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidArgument(f"limit must be a whole number of at least 1, not {limit!r}")
    if after == "now":
        try:
            end = wait_for_bound(engine, wait, namespaces=namespaces, partition=partition,
                                 on_slow=on_slow, report_after=report_after)
        except BoundTimeout as exc:
            raise Unavailable(f"cannot find the end of the event log: {exc}") from exc
        if copied and namespaces is not None:
            with engine.connect() as conn:
                end = _clamped(conn, namespaces, 0, end)
        return [], end
    if after == "horizon":
        with engine.connect() as conn:
            cursor = horizon(conn)
    elif after is None or isinstance(after, int):
        cursor = after or 0
    else:
        raise InvalidArgument(f"after must be a position, None, 'now' or 'horizon', not {after!r}")
    where = ["position > :after",
             (COPIED_EVENT_SQL if copied else OWNED_EVENT_SQL).format(e="events")]
    params: dict[str, Any] = {"after": cursor, "limit": limit}
    if namespaces is not None:
        where.append("namespace = ANY(:nss)")
        params["nss"] = list(namespaces)
    if partition is not None:
        where.append(Partition.SQL)
        params.update(p_count=partition.count, p_index=partition.index)
    payload = "payload" if contents else _WITHOUT_CONTENT
    if bare_types:
        payload = _BARE.format(payload=payload)
        params["bare"] = list(bare_types)
    # The node id as text: the string the event carries, without a UUID object per row.
    columns = ("position, namespace, type, CAST(node_id AS text) AS node_id, "
               f"{payload} AS payload, committed_at")
    bounded = " AND ".join([*where, "position <= :bound"])
    sql = f"SELECT {columns} FROM events WHERE {bounded} ORDER BY position"
    # The compaction horizon as of the same snapshot as the events, with them: a
    # compaction that committed before the statement shows in it, one that commits
    # after deleted nothing it returned (what ``check_horizon`` after the reads
    # proves, without its round trip when the read is one statement).
    first = f"SELECT {columns}, ({HORIZON_SQL.text}) AS horizon FROM events " \
            f"WHERE {bounded} ORDER BY position LIMIT :limit"
    # Read ahead: the same select with no bound yet, sent behind the bound's steps in
    # their round trip; the rows past the bound are dropped (``_bound_and_ahead``).
    ahead = None if not read_ahead else (
        _compiled(f"SELECT {columns}, ({HORIZON_SQL.text}) AS horizon FROM events "
                   f"WHERE {' AND '.join(where)} ORDER BY position LIMIT :limit"),
        params)
    # One connection in autocommit for the whole read: the bound's steps and the select
    # are separate statements as before (each its own snapshot, taken after the one
    # before it ended), without a checkout, a BEGIN and a ROLLBACK in between.
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        # Only events of these namespaces (partition) are read, so imports of others
        # need not be waited for.
        started = time.monotonic()
        read: list[Any] | None = None
        try:
            bound, read = _bound_and_ahead(
                conn, wait, namespaces=namespaces, partition=partition, on_slow=on_slow,
                report_after=report_after, ahead=ahead)
        except BoundTimeout:
            bound = None
        if timings is not None:
            timings["bound"] = time.monotonic() - started
            timings["read_ahead"] = float(read is not None)
        if bound is None:
            if cursor:
                check_not_ahead(conn, cursor)
            return [], cursor
        check_not_ahead_of(cursor, bound)
        if until is not None:
            bound = min(bound, until)
        if bound <= cursor:
            return [], cursor
        params["bound"] = bound
        if read is None:
            # ``all()``: the driver's one fetch of every row, not one ``fetchone`` per row.
            rows: list[Any] = list(conn.execute(text(first), params).all())
            cut_short = len(rows) >= limit
        else:
            # In position order: keep those up to the bound. The read reached the bound
            # unless it stopped at ``limit`` on a row at or below it.
            rows = [row for row in read if row.position <= bound]
            cut_short = len(read) >= limit and read[-1].position <= bound
        if not cut_short:
            next_cursor = bound
            seen_in = rows or read
            if seen_in:
                seen = seen_in[0].horizon
                if cursor < (0 if seen is None else int(seen)):
                    raise CursorExpired(cursor, int(seen))
            else:
                check_horizon(conn, cursor)
        else:
            # Finish the last transaction's block so no reader sees part of a group.
            last = int(rows[-1].position)
            next_cursor = min(block_end(last), bound)
            rows += conn.execute(
                text(sql),
                {**params, "after": last, "bound": next_cursor},
            ).all()
            # After the reads, not before: a compaction that committed before them shows
            # here; one that commits after them deleted nothing they returned.
            check_horizon(conn, cursor)
        if copied and namespaces is not None:
            next_cursor = _clamped(conn, namespaces, cursor, next_cursor)
    # Rows unpacked as tuples (the first statement's have the horizon last): no lookup
    # by column name per field of every event.
    events = [
        Event(position, namespace, type_, node_id, {} if payload is None else payload,
              committed_at)
        for position, namespace, type_, node_id, payload, committed_at, *_ in rows
    ]
    return events, next_cursor
