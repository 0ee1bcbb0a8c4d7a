"""The event log's writing side: a transaction's events, appended inside it into a
block of positions of its own, in its last statement. The reading side, which relies
on what this module promises, is ``coordinator.event_reader``.

Why positions need care: a sequence value is taken at insert time but the row
becomes visible at commit. If A takes position 10 and B takes 11 and commits
first, a reader that moved its cursor past 11 would never see 10.

The mechanism (no writer ever waits for another writer or for a reader):

* Writing: a transaction's events are buffered and, as its last statement before
  COMMIT, it takes ONE value from
  ``event_position_seq`` (INCREMENT BY ``POSITION_BLOCK``, CACHE 1). That value
  is the base of a block owned by this transaction alone; its events use
  ``base, base+1, ...``. So a transaction's events form one contiguous range.
  In that same statement, before ``nextval``, it (a) forces its transaction id
  (``pg_current_xact_id()``), then (b) takes the *position lock*: ROW SHARE on the
  empty table ``pathkeeper_locks.position_lock`` (``POSITION_LOCK_SQL``, a
  ``LOCK TABLE`` in a function of migration 0010), held until the transaction ends.
  Writers never conflict on it (ROW SHARE conflicts only with EXCLUSIVE and ACCESS
  EXCLUSIVE, which nothing of ours takes). It only marks, in ``pg_locks`` and in this
  database, the transactions that may hold a block: nothing else takes it.
* Imports (``coordinator/importer.py``) are the one writer with more events than a
  block holds: in the same kind of claiming statement (id, then lock, then
  ``nextval``) they take several values and use a run of consecutive ones, so their
  events are still one contiguous range, made visible by one commit. A reader with
  a ``limit`` may return such a range over several reads, each of whole blocks.
  Nothing else changes: the lock is taken before every ``nextval``.
  An import holds the position lock through its events insert and its commit, seconds
  for hundreds of thousands of lines, and a reader waits for it. Its transaction writes
  events of one namespace only, so before its claim it *marks* itself with that
  namespace: ``IMPORT_MARK_SQL``, a shared transaction-level advisory lock keyed on the
  namespace's hash (the one partitions are cut by). A reader that reads only some
  namespaces or one partition (the worker's partitions, the change feed) does not wait,
  in step 3, for a holder whose marks are all outside what it reads: no event of that
  transaction can be one it reads, so moving its cursor past those blocks loses nothing.
  A reader of the import's partition or namespace, or of the whole log, waits as before.
  The mark is advisory, so an outsider can take its keys, but that gains nothing: taking
  one shared marks no holder of the position lock (which an outsider cannot be), and
  holding one exclusive only makes our import's *try* fail, leaving it unmarked, i.e.
  waited for by every reader, as without marks. The mark is taken before the position
  lock, so a reader that lists the holder (one read of ``pg_locks``) lists its mark too.
  Why not cut the import into pieces that each take and release blocks: a block's
  positions cannot be released before the commit that makes them visible (readers
  would pass them), and events claimed before the insert only make readers wait longer;
  a tenant's write that came later is after the import's blocks in the one order of the
  log, so a reader of both waits for the import whatever the pieces. What the mark
  does is keep the wait to the readers that read the import's events.
* Waking readers: the coordinator sends ``pg_notify`` after COMMIT, not in this
  statement, so notifying commits do not serialize on the notify lock: from a thread
  of its own (``coordinator/notifier.py``), at most once per interval;
  ``TAKE_BLOCK_SQL`` keeps its ``notify`` parameter for callers that want the
  in-transaction form. Sending COMMIT right behind the block statement changes nothing
  above: the block statement is still the last one of the transaction,
  and the server runs pipelined statements one after another, in order.

Why the statement forces the id explicitly, and in a WHERE clause: ``pg_current_xact_id()``
is STABLE, and an unused stable output column of a subquery is replaced by NULL
without being evaluated; the id would then come only from the INSERT, after the
block was taken. ``test_block_statement_takes_id_then_lock_then_block`` checks the plan.

Why a lock on a table of ours and not an advisory lock (what it was): an advisory lock
of any key can be taken by any role that can connect, and ours was public (a constant
and the sequence's oid). A role with no privilege on our tables took it in shared mode
and the reader waited for it as for a writer, for as long as its session lived; in
exclusive mode every writer's claim waited for it and failed at ``lock_timeout``. A
table lock needs privileges, and the lock table is in a schema of its own on which
PUBLIC has nothing: a role without USAGE on it cannot even name the table, so it can
take no lock on it in any mode, not even the ones PostgreSQL takes while parsing a
statement, before it checks privileges (``PREPARE ... SELECT ... FOR UPDATE`` would
hold ROW SHARE on a table of the public schema with no privilege at all, an
``INSERT`` prepared the same way ROW EXCLUSIVE). What a role can reach by the table's
oid alone (``pg_relation_size``) is ACCESS SHARE, for one call: it conflicts with no
writer and is not the mode the reader looks for. So the reader needs no list of roles to
tell writers from outsiders: only a role that may write our tables (the owner, or one
granted USAGE on the schema and UPDATE on the table, which is a writer) can hold the
lock, and filtering ``pg_locks`` by role instead would still have let an outsider's
exclusive lock stop every write. ``tests/test_foreign_role_locks.py`` has a role with
nothing but CONNECT try each of these. A superuser, or the owner, can of course still
stop anything: they are not outsiders. Another installation in another schema of the
same database shares the lock table: its readers and ours wait for each other's
writers, which is safe (waiting is never wrong), only slower.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import Connection, text

from .db import Driver, driver_sql
from .errors import TooLarge
from .events import DomainEvent, encode
from .results import POSITION_BLOCK

NOTIFY_CHANNEL = "pathkeeper_events"


#: Writers hold ROW SHARE on this table (migration 0010; it never holds rows) from just
#: before they take their block until their transaction ends: the *position lock*.
POSITION_LOCK_TABLE = "pathkeeper_locks.position_lock"
#: The call a writer makes before ``nextval('event_position_seq')`` (see the docstring):
#: ``LOCK TABLE`` in a function, so that it fits in the writer's one claiming statement.
POSITION_LOCK_SQL = "pathkeeper_locks.take_position_lock()"

#: An import marks its transaction with the namespace it writes, before its claim:
#: ``pg_try_advisory_xact_lock_shared(IMPORT_MARK_CLASS, <the namespace's hash>)``, the
#: hash partitions are taken from (``event_reader.Partition.SQL``). Readers that read neither that
#: namespace nor its partition do not wait for a holder of the position lock that holds
#: such a mark (and no mark of theirs). See the docstring ("Imports").
IMPORT_MARK_CLASS = 0x504B494D  # "PKIM"
IMPORT_MARK_SQL = (
    f"pg_try_advisory_xact_lock_shared({IMPORT_MARK_CLASS}, "
    "CAST(hashtext(CAST(:ns AS text))::bigint & 2147483647 AS integer))"
)

#: The shard fence's advisory lock class, 0x504B4645 ("PKFE"): writers take
#: ``(FENCE_CLASS, <the namespace's hash>)`` shared (``fn_check_placed.sql``), a move's
#: freeze takes it exclusive (``fn_freeze_namespace.sql``). See docs/sharding.md.
FENCE_CLASS = 0x504B4645


def position_claim_sql(namespaces: str | None = None) -> str:
    """The claim a writer makes before its ``nextval``, as a subquery. The subqueries run
    innermost first (OFFSET 0 keeps each one a separate plan node): the fence, the
    transaction has its id, then the position lock. The WHERE makes pg_current_xact_id()
    run at all: it is STABLE, and the planner replaces an unused stable output column of
    a subquery by NULL without evaluating it.

    ``namespaces``, an SQL expression of a ``text[]`` (the namespaces the transaction
    writes events of), puts the shard fence (``pathkeeper_check_placed``, once per
    namespace) first: so a transaction that never called a server function (a group's
    plain statements, a namespace's create or drop, an import) is refused for a
    namespace frozen or not on this server, before it holds the position lock (readers
    wait for holders of that lock, and must not wait for a writer waiting on a freeze).
    A volatile function's output column is kept (and so evaluated) under the count.
    Without ``namespaces``: a claim whose statement already went through the fence (the
    lone statements of ``coordinator.single_statement`` call server functions)."""
    fence = ""
    if namespaces is not None:
        fence = f"""
                FROM (
                    SELECT count(f.placed) AS fenced FROM (
                        SELECT pathkeeper_check_placed(u.ns) AS placed
                        FROM (SELECT DISTINCT ns FROM unnest({namespaces}) AS n(ns)) AS u
                        OFFSET 0
                    ) AS f
                ) AS fence"""
    return f"""
            SELECT {POSITION_LOCK_SQL} AS locked
            FROM (SELECT pg_current_xact_id() AS xid{fence.replace(chr(10), chr(10) + "    ")}
                  OFFSET 0) AS xact
            WHERE xact.xid IS NOT NULL
            OFFSET 0"""


#: The claim without the fence (see ``position_claim_sql``).
POSITION_CLAIM_SQL = position_claim_sql()
# A writer's last statement: the fence and the claim, then a block, insert the events,
# notify. One round trip.
TAKE_BLOCK_SQL = text(
    f"""
    WITH block AS (
        SELECT nextval('event_position_seq') AS base
        FROM ({position_claim_sql("CAST(:nss AS text[])")}
        ) AS claim
    ), written AS (
        INSERT INTO events (namespace, position, node_id, type, payload)
        SELECT e.ns, block.base + e.i - 1, CAST(e.node AS uuid), e.type,
               CAST(e.payload AS jsonb)
        FROM block, unnest(CAST(:nss AS text[]), CAST(:nodes AS text[]),
                           CAST(:types AS text[]), CAST(:payloads AS text[]))
             WITH ORDINALITY AS e(ns, node, type, payload, i)
    )
    SELECT base, CASE WHEN :notify THEN pg_notify(:channel, (
        SELECT string_agg(DISTINCT CAST(hashtext(ns)::bigint & 2147483647 AS text), ',')
        FROM unnest(CAST(:nss AS text[])) AS u(ns)
    )) END
    FROM block
    """
)
_TAKE_BLOCK = driver_sql(TAKE_BLOCK_SQL, binary=("nss", "nodes", "types", "payloads"))


class EventAppender:
    """Collects one transaction's events and writes them into its own block of positions.

    ``flush`` takes the block and inserts the events in one statement; the unit of
    work runs it as the transaction's last statement, after every lock was granted
    and every read done. So a transaction that built on another one's changes (read
    its committed rows or waited for its row locks) always gets the later positions,
    groups of many operations included, and a rolled-back transaction takes no block.
    """

    def __init__(self, conn: Connection, notify: bool = True) -> None:
        self._conn = conn
        self._notify = notify
        self._base: int | None = None
        self._pending: list[tuple[str, str, str, str]] = []

    @property
    def base(self) -> int | None:
        """The first position of this transaction's block, once ``flush`` has run."""
        return self._base

    def append(self, namespace: str, event: DomainEvent) -> EventRef:
        """Buffer ``event`` of ``namespace`` (in its wire form) for ``flush``."""
        if self._base is not None:
            raise RuntimeError("this transaction's events were already written")
        if len(self._pending) >= POSITION_BLOCK:
            raise TooLarge(f"a transaction may append at most {POSITION_BLOCK} events")
        type_, node_id, payload = encode(event)
        self._pending.append(
            (namespace, node_id, type_, json.dumps(payload, ensure_ascii=False))
        )
        return EventRef(self, len(self._pending) - 1)

    def flush(self, *, commit: bool = False) -> bool:
        """Take the block and insert the events; a no-op without events or when done.

        With ``commit``, COMMIT is sent right behind that statement and both answers
        are awaited once (one round trip instead of two): for a caller with nothing
        left to do in the transaction. Returns whether it committed (not without
        events). If the connection fails, whether the COMMIT applied is unknown: the
        caller must not run the transaction again."""
        if self._base is not None or not self._pending:
            return False
        namespaces, node_ids, types, payloads = (list(c) for c in zip(*self._pending, strict=True))
        params = {
            "nss": namespaces,
            "nodes": node_ids,
            "types": types,
            "payloads": payloads,
            # Delivered at commit, once per transaction; the payload names the
            # partition hashes of its namespaces (``notified_partitions``).
            "notify": self._notify,
            "channel": NOTIFY_CHANNEL,
        }
        db = Driver(self._conn)
        if commit:
            block = db.send_and_commit(_TAKE_BLOCK, params)
        else:
            block = db.send(_TAKE_BLOCK, params)
        with db.errors(_TAKE_BLOCK, params):
            row = block.fetchone()
        assert row is not None
        self._base = int(row.base)
        return commit


@dataclass(frozen=True, eq=False)
class EventRef:
    """One appended event; its position is known once its transaction's block is taken."""

    appender: EventAppender
    index: int

    @property
    def position(self) -> int | None:
        base = self.appender.base
        return None if base is None else base + self.index
