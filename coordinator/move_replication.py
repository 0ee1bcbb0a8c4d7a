"""The PostgreSQL mechanics of a namespace move (docs/sharding.md section 3): a
row-filtered publication of one namespace on the source, a subscription to it on the
target (its slot on the source), the waits for the copy, and their removal, including
when the source is down.

Every function is idempotent: it looks its objects up by name first, so a move that was
killed between any two statements can run it again. The names are ``pk_move_<h>``
(``replication_name``), the same for the publication, the subscription and the slot, so a
stray one is recognised by its prefix.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

#: An autocommit connection to a shard.
Conn = psycopg.Connection[TupleRow]

#: The prefix of every publication, subscription and slot a move makes.
REPLICATION_PREFIX = "pk_move_"

#: The tables a move copies and the column that names the namespace in each (its
#: primary key's first column: the row filter may use only the replica identity, which
#: is the primary key). ``dead_letters`` is not among them: its ids are the source's own.
PUBLISHED_TABLES = (
    ("namespaces", "name"),
    ("nodes", "namespace"),
    ("events", "namespace"),
    ("idempotency_keys", "namespace"),
)


def replication_name(namespace: str) -> str:
    """The publication's, subscription's and slot's name for moving ``namespace``: a
    hash, since a namespace's name may hold characters an identifier may not."""
    return REPLICATION_PREFIX + hashlib.sha256(namespace.encode()).hexdigest()[:20]


def _exists(conn: Conn, query: str, name: str) -> bool:
    return conn.execute(query.encode(), (name,)).fetchone() is not None


def publication_exists(source: Conn, name: str) -> bool:
    return _exists(source, "SELECT 1 FROM pg_publication WHERE pubname = %s", name)


def slot_exists(source: Conn, name: str) -> bool:
    return _exists(source, "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", name)


def subscription_exists(target: Conn, name: str) -> bool:
    return _exists(
        target,
        "SELECT 1 FROM pg_subscription WHERE subname = %s AND subdbid = "
        "(SELECT oid FROM pg_database WHERE datname = current_database())",
        name,
    )


def create_publication(source: Conn, name: str,
                       namespace: str) -> None:
    """``CREATE PUBLICATION`` of the namespace's rows of ``PUBLISHED_TABLES``."""
    if publication_exists(source, name):
        return
    tables = sql.SQL(", ").join(
        sql.SQL("{} WHERE ({} = {})").format(
            sql.Identifier(table), sql.Identifier(column), sql.Literal(namespace))
        for table, column in PUBLISHED_TABLES
    )
    source.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
        sql.Identifier(name), tables))


def analyze_published(target: Conn) -> None:
    """``ANALYZE`` the tables of ``PUBLISHED_TABLES`` (after their copy arrived)."""
    target.execute(sql.SQL("ANALYZE {}").format(
        sql.SQL(", ").join(sql.Identifier(table) for table, _ in PUBLISHED_TABLES)))


def create_subscription(target: Conn,
                        source: Conn,
                        name: str, source_conninfo: str) -> None:
    """``CREATE SUBSCRIPTION`` on the target (autocommit: it creates the slot on the
    source, which may not run in a transaction block). A slot of the name left on the
    source without its subscription (a creation that failed halfway) is dropped first."""
    if subscription_exists(target, name):
        return
    drop_slot(source, name)
    target.execute(sql.SQL(
        "CREATE SUBSCRIPTION {name} CONNECTION {conninfo} PUBLICATION {name} "
        "WITH (copy_data = true, slot_name = {slot})"
    ).format(name=sql.Identifier(name), conninfo=sql.Literal(source_conninfo),
             slot=sql.Literal(name)))


def tables_not_ready(target: Conn, name: str) -> int:
    """How many of the subscription's tables are not yet in the ``r`` (ready) state:
    still in their initial copy or catching up after it."""
    row = target.execute(
        b"SELECT count(*) FILTER (WHERE r.srsubstate <> 'r'), count(r.srrelid) "
        b"FROM pg_subscription s LEFT JOIN pg_subscription_rel r ON r.srsubid = s.oid "
        b"WHERE s.subname = %s AND s.subdbid = "
        b"(SELECT oid FROM pg_database WHERE datname = current_database())",
        (name,),
    ).fetchone()
    assert row is not None
    not_ready, tables = int(row[0]), int(row[1])
    # Until the apply worker has listed the tables, none is ready.
    return not_ready if tables else len(PUBLISHED_TABLES)


def slot_lag(source: Conn, name: str) -> int | None:
    """Bytes of the source's WAL the slot's subscriber has not confirmed, or None when
    it has confirmed nothing yet (or the slot is gone)."""
    row = source.execute(
        b"SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), confirmed_flush_lsn) "
        b"FROM pg_replication_slots WHERE slot_name = %s",
        (name,),
    ).fetchone()
    if row is None or row[0] is None:
        return None
    return int(row[0])


def wal_position(source: Conn) -> str:
    """The source's WAL insert position now: every change committed before this call is
    below it."""
    row = source.execute(b"SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def confirmed_past(source: Conn, name: str, lsn: str
                   ) -> bool:
    """Whether the slot's subscriber has applied (and confirmed) the source's WAL up to
    ``lsn``."""
    row = source.execute(
        b"SELECT confirmed_flush_lsn >= CAST(%s AS pg_lsn) FROM pg_replication_slots "
        b"WHERE slot_name = %s",
        (lsn, name),
    ).fetchone()
    return bool(row and row[0])


def wait(condition: Callable[[], bool], timeout: float, interval: float) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


def drop_subscription(target: Conn, name: str, *,
                      source_reachable: bool) -> None:
    """Drop the subscription; with the source reachable this drops its slot there too.
    With the source down, ``DROP SUBSCRIPTION`` would fail connecting to it: the
    subscription is detached from its slot first (``slot_name = NONE``), and the slot is
    left on the source for ``drop_slot`` once it is back."""
    if not subscription_exists(target, name):
        return
    ident = sql.Identifier(name)
    if not source_reachable:
        target.execute(sql.SQL("ALTER SUBSCRIPTION {} DISABLE").format(ident))
        target.execute(sql.SQL("ALTER SUBSCRIPTION {} SET (slot_name = NONE)").format(ident))
    target.execute(sql.SQL("DROP SUBSCRIPTION {}").format(ident))


def drop_slot(source: Conn, name: str) -> None:
    """Drop a slot of the name left on the source, once no walsender uses it."""
    if not slot_exists(source, name):
        return
    # A walsender of a subscription dropped a moment ago may still hold it.
    wait(lambda: not _exists(
        source, "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active", name),
        timeout=10.0, interval=0.05)
    source.execute(b"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                   b"WHERE slot_name = %s", (name,))


def drop_publication(source: Conn, name: str) -> None:
    source.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(name)))
