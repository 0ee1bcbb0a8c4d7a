"""Roles with no business with our tables cannot stop the log, writes or snapshots.

The position lock (``coordinator/event_appender.py``) and the scheduled snapshot's lock
(``indexer/retention.py``) are locks a role with nothing but CONNECT must not be able to
take, in any mode. Each test creates such a role in the throwaway cluster, has it try
every way we know to take them (the keys and calls our own code uses, the tables by name,
the parse-time locks of PREPARE), keeps its transaction or session open, and checks that
our writes, log reads and snapshots go on as if it were not there."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import psycopg.conninfo
import pytest
from sqlalchemy import text

from coordinator import Coordinator
from coordinator.db import libpq_url
from coordinator.event_appender import IMPORT_MARK_CLASS, POSITION_LOCK_SQL
from coordinator.event_reader import writers_in_flight
from indexer import retention
from indexer.retention import scheduled_snapshot, snapshot_lock
from pathkeeper.local.postgres import LocalPostgres

#: The advisory key the position lock had (a constant and the sequence's oid): public.
OLD_POSITION_LOCK_CLASS = 0x504B5053

SHARED = (
    f"SELECT pg_advisory_xact_lock_shared({OLD_POSITION_LOCK_CLASS}, "
    "CAST(CAST(CAST('event_position_seq' AS regclass) AS oid) AS integer))",
    f"SELECT {POSITION_LOCK_SQL}",
    "LOCK TABLE pathkeeper_locks.position_lock IN ROW SHARE MODE",
    "PREPARE shared_at_parse AS SELECT FROM pathkeeper_locks.position_lock FOR UPDATE",
    "SELECT pg_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n "
    "ON n.oid = c.relnamespace WHERE n.nspname = 'pathkeeper_locks'",
)
EXCLUSIVE = (
    f"SELECT pg_advisory_xact_lock({OLD_POSITION_LOCK_CLASS}, "
    "CAST(CAST(CAST('event_position_seq' AS regclass) AS oid) AS integer))",
    "LOCK TABLE pathkeeper_locks.position_lock IN ACCESS EXCLUSIVE MODE",
    "PREPARE exclusive_at_parse AS INSERT INTO pathkeeper_locks.position_lock DEFAULT VALUES",
)
#: The advisory key the scheduled snapshot's lock had: public too.
OLD_SNAPSHOT_LOCK_CLASS = 0x534E4150

SNAPSHOT = (
    f"SELECT pg_advisory_lock({OLD_SNAPSHOT_LOCK_CLASS}, 0)",
    "LOCK TABLE pathkeeper_locks.snapshot_lock IN ACCESS EXCLUSIVE MODE",
)


@pytest.fixture
def outsider(database_url: str, pg_cluster: LocalPostgres) -> Iterator[str]:
    """The name of a fresh role that may connect to our database and do nothing else."""
    role = f"outsider_{uuid.uuid4().hex[:12]}"
    url = libpq_url(database_url)
    dbname = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN".encode())
        admin.execute(f"REVOKE ALL ON DATABASE {dbname} FROM PUBLIC".encode())
        admin.execute(f"GRANT CONNECT ON DATABASE {dbname} TO {role}".encode())
    yield role
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
        )
        admin.execute(f"DROP OWNED BY {role}".encode())
        admin.execute(f"DROP ROLE {role}".encode())


@contextmanager
def outsider_trying(database_url: str, role: str, attempts: tuple[str, ...]) -> Iterator[list[str]]:
    """A session of ``role`` with an open transaction in which it tried each of
    ``attempts`` (each in a savepoint, so one refused does not end the others); the
    session's own advisory locks stay too. Yields the attempts that succeeded."""
    with psycopg.connect(libpq_url(database_url), user=role, autocommit=True) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (role,)
        took: list[str] = []
        conn.execute("BEGIN")
        for sql in attempts:
            conn.execute("SAVEPOINT attempt")
            try:
                conn.execute(sql.encode())
            except psycopg.Error:
                conn.execute("ROLLBACK TO SAVEPOINT attempt")
            else:
                conn.execute("RELEASE SAVEPOINT attempt")
                took.append(sql)
        try:
            yield took
        finally:
            conn.execute("ROLLBACK")


def test_the_outsider_has_only_connect(database_url: str, outsider: str) -> None:
    with psycopg.connect(libpq_url(database_url), user=outsider, autocommit=True) as conn, \
            pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT count(*) FROM events")


@pytest.mark.parametrize("mode", ["shared", "exclusive"])
def test_a_role_without_privileges_stops_neither_writes_nor_reads(
    coord: Coordinator, database_url: str, outsider: str, mode: str
) -> None:
    coord.create_namespace("t")
    events, start = coord.read_events(wait=5.0)
    attempts = SHARED if mode == "shared" else EXCLUSIVE
    with outsider_trying(database_url, outsider, attempts) as took:
        # Advisory keys are anyone's, and a table's size by oid is public: nothing else.
        assert all("advisory" in sql or "pg_relation_size" in sql for sql in took), took
        began = time.monotonic()
        made = coord.mkdir("t", "/during")  # the coordinator's lock_timeout is 5 s
        assert time.monotonic() - began < 2.0
        events, cursor = coord.read_events(after=start, wait=0.5)
        assert [e.position for e in events] == [made.seq]
        assert made.seq is not None and cursor >= made.seq
        assert writers_in_flight(coord.engine) == []


def test_a_role_without_privileges_cannot_hold_the_snapshot_lock(
    coord: Coordinator, database_url: str, outsider: str
) -> None:
    coord.create_namespace("s")
    coord.mkdir("s", "/a")
    with outsider_trying(database_url, outsider, SNAPSHOT):
        run = scheduled_snapshot(coord.engine)
    assert run.outcome == "taken", run


def skipped(reason: str) -> float:
    counter = retention.SNAPSHOT_SKIPPED
    value: float = counter.labels(reason=reason)._value.get()  # type: ignore[attr-defined]
    return value


def test_a_skipped_snapshot_is_counted_and_logged_as_a_warning_naming_the_holder(
    coord: Coordinator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pathkeeper.retention")
    coord.create_namespace("s")
    before = skipped("lock_held")
    with snapshot_lock(coord.engine) as held:
        assert held
        with coord.engine.connect() as conn:
            holder = int(conn.execute(text(
                "SELECT pid FROM pg_locks WHERE locktype = 'relation' AND granted AND "
                "relation = CAST('pathkeeper_locks.snapshot_lock' AS regclass)"
            )).scalar_one())
            # The holder's open transaction has no id and no snapshot: it holds back no
            # vacuum however long a snapshot runs.
            assert conn.execute(text(
                "SELECT backend_xid, backend_xmin FROM pg_stat_activity WHERE pid = :pid"
            ), {"pid": holder}).one() == (None, None)
        run = scheduled_snapshot(coord.engine)
    assert run.outcome == "skipped"
    assert skipped("lock_held") == before + 1
    [record] = [r for r in caplog.records if r.getMessage() == "snapshot_skipped"]
    assert record.levelno == logging.WARNING
    fields = record.fields  # type: ignore[attr-defined]
    assert fields["reason"] == run.reason and f"pid {holder}" in run.reason, run.reason


def test_a_writer_of_another_role_with_the_grants_is_still_waited_for(
    coord: Coordinator, database_url: str, outsider: str
) -> None:
    """Nothing in the reader depends on who the writer is: a second role granted what a
    writer needs (the lock's schema and table, our tables and sequence) takes a block in
    a transaction kept open, and a later write is not handed out before it commits."""
    coord.create_namespace("t")
    events, start = coord.read_events(wait=5.0)
    url = libpq_url(database_url)
    with psycopg.connect(url, autocommit=True) as admin:
        for grant in (
            f"GRANT USAGE ON SCHEMA pathkeeper_locks TO {outsider}",
            f"GRANT UPDATE ON pathkeeper_locks.position_lock TO {outsider}",
            f"GRANT EXECUTE ON FUNCTION {POSITION_LOCK_SQL.removesuffix('()')}() TO {outsider}",
            f"GRANT INSERT, SELECT ON events TO {outsider}",
            f"GRANT USAGE ON SEQUENCE event_position_seq TO {outsider}",
        ):
            admin.execute(grant.encode())
    with psycopg.connect(url, user=outsider, autocommit=True) as writer:
        writer.execute("BEGIN")
        writer.execute("SELECT pg_current_xact_id()")
        writer.execute(f"SELECT {POSITION_LOCK_SQL}".encode())
        row = writer.execute(
            "INSERT INTO events (namespace, position, type, payload) "
            "SELECT 't', nextval('event_position_seq'), 'created', "
            "'{\"id\": \"x\", \"path\": \"/granted\"}' RETURNING position"
        ).fetchone()
        assert row is not None
        later = coord.mkdir("t", "/later")
        events, cursor = coord.read_events(after=start, wait=0.3)
        assert events == [] and cursor == start
        assert [w.pid for w in writers_in_flight(coord.engine)] == [writer.info.backend_pid]
        writer.execute("COMMIT")
    events, cursor = coord.read_events(after=start, wait=5.0)
    assert [e.position for e in events] == [row[0], later.seq]


def test_a_role_without_privileges_gains_nothing_from_the_import_mark_keys(
    coord: Coordinator, database_url: str, outsider: str
) -> None:
    """The import's namespace mark is an advisory lock, so an outsider can take its keys.
    Held exclusive, our import's try fails: the import still runs and commits, unmarked,
    so every reader waits for it (what all did before marks; never a gap). Held shared
    for another namespace, it marks no holder of the position lock: nothing changes."""
    from test_import_readers import import_held_open, namespaces_apart

    big, small = namespaces_apart(coord)
    coord.create_namespace(big)
    coord.create_namespace(small)
    _, start = coord.read_events(wait=5.0)
    keys = (
        f"SELECT pg_advisory_xact_lock({IMPORT_MARK_CLASS}, "
        f"CAST(hashtext('{big}')::bigint & 2147483647 AS integer))",
        f"SELECT pg_advisory_xact_lock_shared({IMPORT_MARK_CLASS}, "
        f"CAST(hashtext('{small}')::bigint & 2147483647 AS integer))",
    )
    with outsider_trying(database_url, outsider, keys) as took:
        assert took == list(keys)  # advisory: anyone can
        with import_held_open(coord, big, 100):
            made = coord.mkdir(small, "/during")
            assert coord.read_events(after=start, namespaces=[small], wait=0.3) == ([], start)
            assert coord.read_events(after=start, wait=0.3) == ([], start)
        events, _ = coord.read_events(after=start, limit=10_000, wait=5.0)
    assert [e.namespace for e in events] == [big] * (100 + 2) + [small]
    assert events[-1].position == made.seq
