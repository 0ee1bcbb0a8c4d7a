"""The pooled connection lone statements run on (``db.LoneConnection``): a driver error
is raised as SQLAlchemy raises it, a connection that died is never handed out again,
and one that only saw a refused statement goes back to the pool as it was."""

from __future__ import annotations

import logging

import psycopg
import pytest
from sqlalchemy.exc import DataError, DBAPIError
from tree_checks import largest_value_held, value_held

from coordinator import Coordinator
from coordinator.commands import Mkdir
from coordinator.db import driver_sql, libpq_url, lone_connection

PID_SQL = driver_sql("SELECT pg_backend_pid() AS pid")


def _pid(coord: Coordinator) -> int:
    with lone_connection(coord.engine) as conn:
        return int(conn.fetch_one(PID_SQL, {}).pid)


def test_a_connection_killed_under_a_statement_is_replaced(
    database_url: str, ns: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A pool of one connection: the next one handed out is that one or its replacement.
    with Coordinator.connect(database_url, pool_size=1, max_overflow=0) as coord:
        pid = _pid(coord)
        with lone_connection(coord.engine) as conn:
            with psycopg.connect(libpq_url(database_url), autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            with caplog.at_level(logging.ERROR, logger="sqlalchemy.pool"):
                with pytest.raises(DBAPIError) as lost:
                    conn.fetch_one(PID_SQL, {})
        assert lost.value.connection_invalidated
        # Invalidated, not given back to be reset: the pool's reset of a dead
        # connection fails and is logged as an error.
        assert not caplog.records, [r.getMessage() for r in caplog.records]
        # The pool opened another in its place: a new server process, which works.
        assert _pid(coord) != pid
        assert coord.execute(ns, Mkdir("/after")).node.path == "/after"


def test_a_refused_statement_leaves_the_connection_as_it_was(coord: Coordinator) -> None:
    pid = _pid(coord)
    with lone_connection(coord.engine) as conn:
        with pytest.raises(DataError) as refused:
            conn.fetch_one(driver_sql("SELECT 1 / 0"), {})
        assert not refused.value.connection_invalidated
        assert not conn.raw.autocommit  # as the rest of the pool's users expect it
    assert _pid(coord) == pid


def test_lone_statements_share_a_kept_cursor_that_keeps_no_content(
    database_url: str, ns: str
) -> None:
    content = "x" * 1_000_000
    with Coordinator.connect(database_url, pool_size=1, max_overflow=0) as coord:
        node = coord.create_file(ns, "/big", content).node
        with lone_connection(coord.engine) as conn:
            kept = conn._kept_cursor()
        assert value_held(kept, "name") == b"big"  # the create's answer, no content
        assert largest_value_held(kept) < 100
        assert coord.rename(ns, node.id, "big2").node.path == "/big2"
        assert value_held(kept, "name") == b"big2"  # the rename ran on it too
        # A read of the content runs on a cursor of its own: the kept one holds the
        # last rename's answer, not the 1 MB the read answered.
        assert coord.get(ns, node.id).content == content
        with lone_connection(coord.engine) as conn:
            assert conn._kept_cursor() is kept
        assert value_held(kept, "name") == b"big2"
        assert largest_value_held(kept) < 100
