"""The commands that are one statement, and a node's read, for an asyncio server: the
statements of ``single_statement``, sent on a pool of asyncio psycopg connections
instead of a blocking connection in a thread.

Why: an HTTP worker that hands each request to a thread for the blocking
``Coordinator`` pays for the hand-off, for the pool's checkout under the GIL and for
the wake-ups between the loop and the thread, on every request. Measured on this
project's 2-vCPU machines (``bench/bench_http.py``, 2 workers, 16 connections), a
bare rename route reached 0.60 of the in-process rate through a thread and 0.85 on an
asyncio connection.

Nothing of the rule is here: the statement, its parameters, what its row or its
refusal means (``single_statement.Lone``, ``tree.StatQuery``), when a failure runs
again (``retries``) and what a driver error becomes (``db.translate``) are the ones
the ``Coordinator`` uses. A command that is not one statement (``mkdir`` with
``parents``) is not for this class: ``single_statement.lone`` says which are.

Connections are in autocommit with the coordinator's session limits; the pool opens
them as they are needed, up to ``Settings.pool_size``, and a request waits at most
``Settings.pool_timeout`` for one (then ``psycopg_pool.PoolTimeout``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg.rows import namedtuple_row
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.exc import DBAPIError, IntegrityError

from . import paths
from .commands import Command
from .db import (
    closed_by_server,
    libpq_url,
    outcome_unknown,
    parse_database_url,
    sent_and_lost,
    session_args,
    wrapped,
)
from .results import MutationResult, Node
from .retries import Disconnected, Retry, backoff_seconds, check_retry
from .server_calls import StatQuery
from .settings import Settings
from .single_statement import Lone, lone

T = TypeVar("T")
Connection = psycopg.AsyncConnection[Any]


class AsyncStatements:
    """Lone commands and stats on an asyncio pool; ``open`` it in the loop that uses
    it, ``close`` it there. ``wake`` is called with the namespace after a commit that
    wrote an event (the ``Coordinator``'s ``wake_indexer``)."""

    def __init__(self, database_url: str, settings: Settings, *,
                 wake: Callable[[str], None], statement_timeout: float | None = None) -> None:
        self.settings = settings
        self.wake = wake
        url = parse_database_url(database_url).render_as_string(hide_password=False)
        self.pool = AsyncConnectionPool(
            libpq_url(url),
            kwargs={**session_args(settings, statement_timeout), "autocommit": True},
            min_size=1, max_size=settings.pool_size, timeout=settings.pool_timeout,
            open=False, name="pathkeeper-statements",
        )

    async def open(self) -> None:
        """Start the pool; connections are opened in the background (a database down at
        start is a request's ``PoolTimeout``, not a failed start)."""
        await self.pool.open(wait=False)

    async def close(self) -> None:
        await self.pool.close()

    def statement(self, ns: str, command: Command) -> Lone | None:
        """``command`` as the one statement ``execute`` sends; None for a command that is
        not one (run it with the ``Coordinator``)."""
        return lone(paths.validate_namespace(ns), command, self.settings)

    async def execute(self, statement: Lone) -> MutationResult:
        """``statement`` as a transaction of its own, retried on transient races until
        sent; not re-run once sent, since it commits as it ends."""

        async def once(conn: Connection) -> MutationResult:
            try:
                row = await _fetch_one(conn, statement.sql, statement.params)
            except IntegrityError as exc:
                raise statement.refused(exc) from exc
            except DBAPIError as exc:
                if sent_and_lost(exc):
                    raise outcome_unknown(exc) from exc
                raise
            return statement.outcome(row)

        result = await self._retried(once, reads=False)
        if result.event is not None:
            self.wake(statement.ns)
        return result

    async def stat(self, ns: str, ref: str) -> Node:
        """The node at a path (``/...``) or with an id, as ``Coordinator.stat`` and
        ``get`` answer it."""
        call = StatQuery.of(paths.validate_namespace(ns), ref)

        async def once(conn: Connection) -> Node:
            return call.result(await _fetch_one(conn, call.sql, call.params))

        return await self._retried(once, reads=True)

    async def _retried(self, once: Callable[[Connection], Awaitable[T]], *, reads: bool) -> T:
        """``once`` on a pooled connection, run again as ``retries`` says. A connection
        the server has closed is replaced before anything is sent on it; a read (``reads``)
        also runs again when its connection dies under it."""
        attempt = 0
        while True:
            try:
                async with self.pool.connection() as conn:
                    if closed_by_server(conn.pgconn.socket):  # e.g. the server restarted
                        await conn.close()  # the pool drops it
                        raise Retry()
                    try:
                        return await once(conn)
                    except DBAPIError as exc:
                        if reads and exc.connection_invalidated:
                            raise Disconnected(exc) from exc
                        raise
            except (Retry, Disconnected, DBAPIError) as exc:
                check_retry(exc, attempt, self.settings.max_retries)
            await asyncio.sleep(backoff_seconds(attempt))
            attempt += 1


async def _fetch_one(conn: Connection, sql: str, params: Any) -> Any:
    """The one row (or None) of ``sql``; a driver error as SQLAlchemy raises it."""
    try:
        cur = conn.cursor(row_factory=namedtuple_row)
        await cur.execute(sql, params)
        return await cur.fetchone()
    except psycopg.Error as exc:
        raise wrapped(exc, sql, params, invalidated=conn.broken) from exc

