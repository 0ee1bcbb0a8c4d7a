"""``AsyncStatements`` sends the lone commands and stats on asyncio connections: the same
answers, refusals, rows and events as the ``Coordinator``, the same rules under
concurrent clients, and a connection the server closed is replaced, not failed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

import psycopg
import pytest
from tree_checks import check_tree, largest_value_held, value_held

from coordinator import Coordinator, CoordinatorError
from coordinator.async_statements import AsyncStatements
from coordinator.commands import (
    Command,
    CreateFile,
    Delete,
    Mkdir,
    Move,
    Rename,
    SetMetadata,
    WriteFile,
)
from coordinator.db import libpq_url
from coordinator.results import MutationResult, Node

T = TypeVar("T")


def _run(database_url: str, coord: Coordinator, body: Callable[[AsyncStatements], Awaitable[T]]
         ) -> T:
    """``body(statements)`` in an event loop of its own, the pool opened and closed in it."""

    async def main() -> T:
        statements = AsyncStatements(database_url, coord.settings, wake=coord.wake_indexer)
        await statements.open()
        try:
            return await body(statements)
        finally:
            await statements.close()

    return asyncio.run(main())


def _node(node: Node) -> tuple[Any, ...]:
    return (node.path, node.name, node.kind, node.content, node.metadata, node.version)


def _answer(fn: Callable[[], MutationResult | Node]) -> tuple[Any, ...]:
    try:
        got = fn()
    except CoordinatorError as exc:
        return ("error", type(exc).__name__, str(exc))
    if isinstance(got, Node):
        return ("node", _node(got))
    return ("changed", _node(got.node), got.event is not None)


# Every lone command, by path, with refusals of each kind among them.
SCRIPT: list[Command | str] = [
    Mkdir("/d"), Mkdir("/d/e"), CreateFile("/d/f", "body", {"k": 1}), Mkdir("/x/y"),
    CreateFile("/d/f/g"), CreateFile("/d/f"), Mkdir("/d/bad\x01name"),
    Rename("/d/f", "g"), Rename("/d/g", "g"), Rename("/d/g", "e"), Rename("/", "r"),
    Rename("/d/g", "h", if_version=7), "/d/g", "/d/f", "/nope/x",
    Move("/d/g", "/d/e/g"), Move("/d/e", "/d/e/g/z"), Move("/d", "/d/e/d"),
    WriteFile("/d/e/g", "new", {"m": [1]}), WriteFile("/d/e", "x"),
    SetMetadata("/d/e/g", {"n": None}, if_version=3), SetMetadata("/d/e/g", {"n": 2}),
    Delete("/d"), Delete("/d/e/g"), Delete("/d/e/g"), Delete("/d", recursive=True), "/d",
]


def test_every_lone_command_answers_as_the_coordinator(
    coord: Coordinator, database_url: str
) -> None:
    coord.create_namespace("sync")
    coord.create_namespace("async")
    expected = [
        _answer(lambda s=step: coord.stat("sync", s) if isinstance(s, str)  # type: ignore[misc]
                else coord.execute("sync", s))
        for step in SCRIPT
    ]

    async def body(statements: AsyncStatements) -> list[tuple[Any, ...]]:
        answers = []
        for step in SCRIPT:
            try:
                if isinstance(step, str):
                    got: MutationResult | Node = await statements.stat("async", step)
                else:
                    statement = statements.statement("async", step)
                    assert statement is not None, step
                    got = await statements.execute(statement)
                answers.append(_answer(lambda g=got: g))  # type: ignore[misc]
            except CoordinatorError as exc:
                answers.append(("error", type(exc).__name__, str(exc)))
        return answers

    got = _run(database_url, coord, body)
    for step, want, have in zip(SCRIPT, expected, got, strict=True):
        assert have == want, step
    kinds = {a[0] for a in got} | {a[1] for a in got if a[0] == "error"}
    assert {"changed", "node", "NotFound", "AlreadyExists", "Conflict", "InvalidMove",
            "NotADirectory", "DirectoryNotEmpty", "InvalidName"} <= kinds
    # The same events, in the same order, with the same payloads but for the ids.
    with coord.engine.connect() as conn:
        logs = {
            ns: [(t, {k: v for k, v in p.items() if "id" not in k})
                 for t, p in conn.exec_driver_sql(
                     "SELECT type, payload FROM events WHERE namespace = %(ns)s "
                     "ORDER BY position", {"ns": ns})]
            for ns in ("sync", "async")
        }
    assert logs["async"] == logs["sync"]
    types = {t for t, _ in logs["sync"]}
    assert {"created", "moved", "written", "metadata_set", "deleted"} <= types


def test_a_mkdir_with_parents_is_not_one_statement(coord: Coordinator, database_url: str
                                                   ) -> None:
    async def body(statements: AsyncStatements) -> object:
        return statements.statement("ns", Mkdir("/a/b", parents=True))

    assert _run(database_url, coord, body) is None


def test_concurrent_renames_and_moves_with_blocking_clients_keep_one_tree(
    coord: Coordinator, database_url: str
) -> None:
    """Asyncio tasks and threads with the ``Coordinator`` rename and move the same nodes
    at once: every change is whole, each gets one event, and the tree stays one tree."""
    coord.create_namespace("race")
    for i in range(4):
        coord.mkdir("race", f"/d{i}/sub", parents=True)
        coord.create_file("race", f"/d{i}/sub/f")
    steps: list[Command] = [Rename("/d0/sub", "s2"), Rename("/d0/s2", "sub"), Move("/d1", "/d2/d1"),
             Move("/d2/d1", "/d1"), Move("/d3/sub", "/d0/sub/x"), Move("/d0/sub/x", "/d3/sub")]
    done: list[str] = []
    lock = threading.Lock()

    def outcome(fn: Callable[[], MutationResult]) -> None:
        try:
            result = fn()
            with lock:
                done.append("changed" if result.event is not None else "same")
        except CoordinatorError as exc:
            with lock:
                done.append(type(exc).__name__)

    def blocking_client(k: int) -> None:
        for n in range(40):
            step = steps[(n + k) % len(steps)]
            outcome(lambda s=step: coord.execute("race", s))  # type: ignore[misc]

    async def async_client(statements: AsyncStatements, k: int) -> None:
        for n in range(40):
            step = steps[(n + k) % len(steps)]
            try:
                statement = statements.statement("race", step)
                assert statement is not None
                result = await statements.execute(statement)
                with lock:
                    done.append("changed" if result.event is not None else "same")
            except CoordinatorError as exc:
                with lock:
                    done.append(type(exc).__name__)

    async def body(statements: AsyncStatements) -> None:
        threads = [threading.Thread(target=blocking_client, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        await asyncio.gather(*(async_client(statements, k) for k in range(6)))
        for t in threads:
            t.join(60)

    _run(database_url, coord, body)
    assert len(done) == 9 * 40
    # Only the refusals a race explains: the node moved away, or is there already.
    assert set(done) <= {"changed", "same", "NotFound", "AlreadyExists", "InvalidMove",
                         "NotADirectory", "Conflict"}
    assert done.count("changed") > 50
    assert check_tree(coord, "race") == 1 + 4 * 3
    with coord.engine.connect() as conn:
        moved = conn.exec_driver_sql(
            "SELECT count(*) FROM events WHERE namespace = 'race' AND type = 'moved'"
        ).scalar_one()
    assert moved == done.count("changed")


def test_a_connection_the_server_closed_is_replaced(coord: Coordinator, database_url: str
                                                    ) -> None:
    coord.create_namespace("restart")
    coord.mkdir("restart", "/a")

    async def body(statements: AsyncStatements) -> tuple[MutationResult, Node]:
        await statements.stat("restart", "/a")  # a pooled connection, idle now
        with psycopg.connect(libpq_url(database_url), autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'pathkeeper' AND state = 'idle' "
                "AND pid <> pg_backend_pid() AND datname = current_database()"
            ).fetchone()
        assert killed is not None and killed[0] >= 1
        await asyncio.sleep(0.2)  # the server's goodbye reaches the socket
        statement = statements.statement("restart", Rename("/a", "b"))
        assert statement is not None
        renamed = await statements.execute(statement)
        return renamed, await statements.stat("restart", "/b")

    renamed, node = _run(database_url, coord, body)
    assert renamed.event is not None and node.version == 2
    # (The coordinator's pooled connections were terminated too: a connection of its own.)
    with psycopg.connect(libpq_url(database_url)) as conn:
        events = conn.execute(
            "SELECT count(*) FROM events WHERE namespace = 'restart' AND type = 'moved'"
        ).fetchone()
    assert events == (1,)


def test_the_pool_waits_at_most_its_timeout(coord: Coordinator, database_url: str) -> None:
    from dataclasses import replace

    from psycopg_pool import PoolTimeout

    coord.create_namespace("busy")
    settings = replace(coord.settings, pool_size=1, pool_timeout=0.3)

    async def body() -> None:
        statements = AsyncStatements(database_url, settings, wake=coord.wake_indexer)
        await statements.open()
        try:
            async with statements.pool.connection():  # the only connection, taken
                with pytest.raises(PoolTimeout):
                    await statements.stat("busy", "/")
            assert (await statements.stat("busy", "/")).path == "/"
        finally:
            await statements.close()

    asyncio.run(body())


def test_statements_share_a_kept_cursor_that_keeps_no_content(
    coord: Coordinator, database_url: str, ns: str
) -> None:
    content = "x" * 1_000_000
    node = coord.create_file(ns, "/big", content).node

    async def main() -> None:
        # A pool of one connection: every statement below runs on it.
        statements = AsyncStatements(database_url, replace(coord.settings, pool_size=1),
                                     wake=coord.wake_indexer)
        await statements.open()
        try:
            statement = statements.statement(ns, Rename(node.id, "b2"))
            assert statement is not None
            renamed = await statements.execute(statement)
            assert renamed.node.path == "/b2"
            async with statements.pool.connection() as conn:
                kept = conn.kept_cursor()
            assert value_held(kept, "name") == b"b2"  # the rename's answer, no content
            assert largest_value_held(kept) < 100
            # A read of the content runs on a cursor of its own: the kept one holds
            # the rename's answer, not the 1 MB the read answered.
            assert (await statements.stat(ns, node.id)).content == content
            async with statements.pool.connection() as conn:
                assert conn.kept_cursor() is kept
            assert value_held(kept, "name") == b"b2"
            assert largest_value_held(kept) < 100
        finally:
            await statements.close()

    asyncio.run(main())
