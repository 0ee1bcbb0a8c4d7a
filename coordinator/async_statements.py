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

With several database servers (a ``ShardMap`` with a directory) there is one pool per
server, and each statement goes to its namespace's, as the ``Coordinator`` routes its
calls (the same map, and the same rule when a server refuses the namespace:
``shard_map.rerouted``). A namespace the map has not cached yet is read from the
directory on the loop's thread: once per namespace and process, and after a move.
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
from .errors import NamespaceFrozen, NamespaceMoved
from .results import MutationResult, Node
from .retries import Disconnected, Retry, backoff_seconds, check_retry
from .server_calls import StatQuery
from .settings import Settings
from .shard_map import Shard, ShardMap, SingleShard, rerouted
from .single_statement import Lone, lone

T = TypeVar("T")


class Connection(psycopg.AsyncConnection[Any]):
    """An asyncio connection that keeps one cursor for its lone statements, as
    ``db.LoneConnection`` does and for the same reason: a new cursor per statement
    makes its adapters and loaders again."""

    _kept: psycopg.AsyncCursor[Any] | None = None

    def kept_cursor(self) -> psycopg.AsyncCursor[Any]:
        if self._kept is None:
            self._kept = self.cursor(row_factory=namedtuple_row)
        return self._kept


class AsyncStatements:
    """Lone commands and stats on an asyncio pool per database server; ``open`` it in
    the loop that uses it, ``close`` it there. ``wake`` is called with the namespace
    after a commit that wrote an event (the ``Coordinator``'s ``wake_indexer``). The
    servers: ``database_url``'s, or those of ``shard_map`` (not closed here)."""

    def __init__(self, database_url: str | None, settings: Settings, *,
                 wake: Callable[[str], None], statement_timeout: float | None = None,
                 shard_map: ShardMap | None = None) -> None:
        self.settings = settings
        self.wake = wake
        if shard_map is None:
            if database_url is None:
                raise ValueError("AsyncStatements needs a database URL or a shard map")
            shard_map = SingleShard(database_url)
        self.shard_map = shard_map
        self._session = {**session_args(settings, statement_timeout), "autocommit": True}
        self._pools: dict[str, AsyncConnectionPool[Connection]] = {}
        self._opened = False

    @property
    def pool(self) -> AsyncConnectionPool[Connection]:
        """The pool of the one server (``database_url``'s)."""
        (only,) = self._pools.values()
        return only

    async def open(self) -> None:
        """Start a pool per server; connections are opened in the background (a database
        down at start is a request's ``PoolTimeout``, not a failed start)."""
        self._opened = True
        for shard in self.shard_map.shards():
            await self._pool(shard)

    async def close(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.close()

    async def _pool(self, shard: Shard) -> AsyncConnectionPool[Connection]:
        """The pool of ``shard``, started on first use (a shard added since ``open``)."""
        pool = self._pools.get(shard.name)
        if pool is None:
            url = parse_database_url(shard.database_url()).render_as_string(
                hide_password=False)
            pool = AsyncConnectionPool(
                libpq_url(url), kwargs=self._session, connection_class=Connection,
                min_size=1, max_size=self.settings.pool_size,
                timeout=self.settings.pool_timeout, open=False,
                name=f"pathkeeper-statements-{shard.name}",
            )
            self._pools[shard.name] = pool
            if self._opened:
                await pool.open(wait=False)
        return pool

    async def _routed(self, ns: str,
                      body: Callable[[AsyncConnectionPool[Connection]], Awaitable[T]]) -> T:
        """``body`` on the pool of ``ns``'s server, and once more on the server the map
        names after a re-read if that one refused the namespace (``rerouted``)."""
        tried = self.shard_map.shard_of(ns)
        try:
            return await body(await self._pool(tried))
        except (NamespaceMoved, NamespaceFrozen) as refusal:
            again = rerouted(self.shard_map, ns, tried, refusal)
        return await body(await self._pool(again))

    def statement(self, ns: str, command: Command) -> Lone | None:
        """``command`` as the one statement ``execute`` sends; None for a command that is
        not one (run it with the ``Coordinator``)."""
        return lone(paths.validate_namespace(ns), command, self.settings)

    async def execute(self, statement: Lone) -> MutationResult:
        """``statement`` as a transaction of its own, retried on transient races until
        sent; not re-run once sent, since it commits as it ends."""
        return await self._routed(
            statement.ns, lambda pool: self._execute_on(pool, statement))

    async def _execute_on(self, pool: AsyncConnectionPool[Connection],
                          statement: Lone) -> MutationResult:

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

        result = await self._retried(pool, once, reads=False)
        if result.event is not None:
            self.wake(statement.ns)
        return result

    async def stat(self, ns: str, ref: str) -> Node:
        """The node at a path (``/...``) or with an id, as ``Coordinator.stat`` and
        ``get`` answer it."""
        call = StatQuery.of(paths.validate_namespace(ns), ref)

        async def once(conn: Connection) -> Node:
            return call.result(await _fetch_one(conn, call.sql, call.params, large=True))

        return await self._routed(
            call.ns, lambda pool: self._retried(pool, once, reads=True))

    async def _retried(self, pool: AsyncConnectionPool[Connection],
                       once: Callable[[Connection], Awaitable[T]], *, reads: bool) -> T:
        """``once`` on a pooled connection, run again as ``retries`` says. A connection
        the server has closed is replaced before anything is sent on it; a read (``reads``)
        also runs again when its connection dies under it."""
        attempt = 0
        while True:
            try:
                async with pool.connection() as conn:
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


async def _fetch_one(conn: Connection, sql: str, params: Any, *, large: bool = False
                     ) -> Any:
    """The one row (or None) of ``sql``; a driver error as SQLAlchemy raises it. On the
    connection's kept cursor, unless the answer may be ``large`` (a file's content),
    which the kept cursor would hold until its next statement."""
    try:
        if large:
            async with conn.cursor(row_factory=namedtuple_row) as cur:
                await cur.execute(sql, params)
                return await cur.fetchone()
        kept = conn.kept_cursor()
        await kept.execute(sql, params)
        return await kept.fetchone()
    except psycopg.Error as exc:
        raise wrapped(exc, sql, params, invalidated=conn.broken) from exc

