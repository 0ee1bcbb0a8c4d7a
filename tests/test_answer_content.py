"""A change answers the node with its content only when the change set the content (a
create, a write): a rename, a move, a metadata change or a delete answers it without
(``None``), alone, in a group and on an asyncio connection alike, so what such a change
costs does not grow with the file. The content itself stays as it was."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from coordinator import Coordinator
from coordinator.async_statements import AsyncStatements
from coordinator.commands import (
    Command,
    Delete,
    MergeMetadata,
    Move,
    Rename,
    SetMetadata,
    WriteFile,
)
from coordinator.results import MutationResult

BODY = "x" * 1_000_000


def _changes(file_id: str) -> list[tuple[Command, str | None]]:
    """Commands on the file, each with the content its answer carries."""
    return [
        (Rename("/d/f", "g"), None),
        (Move(file_id, "/e/g"), None),
        (SetMetadata("/e/g", {"k": 1}), None),
        (MergeMetadata(file_id, {"j": 2}), None),
        (WriteFile(file_id, BODY + "y"), BODY + "y"),
        (Rename(file_id, "h"), None),
        (Delete("/e/h"), None),
    ]


def _each_way(coord: Coordinator, ns: str,
              run: Callable[[Command], MutationResult]) -> list[tuple[str | None, str]]:
    coord.mkdir(ns, "/d")
    coord.mkdir(ns, "/e")
    created = coord.create_file(ns, "/d/f", BODY, {"a": 1})
    assert created.node.content == BODY  # a create answers what it wrote
    answers = []
    stored = BODY
    for command, content in _changes(created.node.id):
        result = run(command)
        assert result.seq is not None, command
        assert result.node.content == content, command
        answers.append((result.node.content and len(result.node.content), result.node.path))
        stored = content if isinstance(command, WriteFile) else stored
        if not isinstance(command, Delete):  # the content is what was last written
            assert coord.get(ns, created.node.id).content == stored, command
    return answers


def test_only_a_change_of_the_content_answers_it(coord: Coordinator,
                                                 database_url: str) -> None:
    answers = {}
    coord.create_namespace("alone")
    answers["alone"] = _each_way(coord, "alone", lambda c: coord.execute("alone", c))
    coord.create_namespace("grouped")
    answers["grouped"] = _each_way(coord, "grouped", lambda c: coord.apply("grouped", [c])[0])

    async def on_asyncio() -> list[tuple[str | None, str]]:
        statements = AsyncStatements(database_url, coord.settings, wake=coord.wake_indexer)
        await statements.open()
        try:
            loop = asyncio.get_running_loop()

            def run(command: Command) -> MutationResult:
                statement = statements.statement("on_asyncio", command)
                assert statement is not None, command
                return asyncio.run_coroutine_threadsafe(
                    statements.execute(statement), loop).result()

            return await asyncio.to_thread(_each_way, coord, "on_asyncio", run)
        finally:
            await statements.close()

    coord.create_namespace("on_asyncio")
    answers["on_asyncio"] = asyncio.run(on_asyncio())
    assert answers["alone"] == answers["grouped"] == answers["on_asyncio"] == [
        (None, "/d/g"), (None, "/e/g"), (None, "/e/g"), (None, "/e/g"),
        (len(BODY) + 1, "/e/g"), (None, "/e/h"), (None, "/e/h")]
