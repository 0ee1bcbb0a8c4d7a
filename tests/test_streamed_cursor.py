"""A server-side cursor whose connection died under it is closed, not left open for the
garbage collector to report (which pytest then pins on whichever test runs next)."""

from __future__ import annotations

import psycopg
from sqlalchemy import create_engine, text

from coordinator.db import libpq_url, sqlalchemy_url, streamed


def test_a_stream_whose_connection_died_leaves_no_cursor_open(database_url: str) -> None:
    engine = create_engine(sqlalchemy_url(database_url))
    try:
        conn = engine.connect()
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        rows = streamed(conn, text("SELECT g FROM generate_series(1, 100000) g"), {}, 10)
        assert next(rows)[0] == 1
        # The psycopg cursor the generator streams from (the result's).
        cursor = rows.gi_frame.f_locals["rows"].cursor  # type: ignore[union-attr]
        assert isinstance(cursor, psycopg.ServerCursor) and not cursor.closed
        with psycopg.connect(libpq_url(database_url), autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        rows.close()  # its CLOSE meets the dead connection
        assert cursor.closed
        conn.invalidate()  # dead: nothing to roll back
        conn.close()
    finally:
        engine.dispose()
