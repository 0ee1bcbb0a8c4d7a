"""Each command says how it runs, alone and in a group, through ``Command.apply`` on a
``commands.Runner``: the coordinator keeps no list of command classes of its own."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import pytest

from coordinator import Conflict, Coordinator, Rename, SetMetadata
from coordinator.commands import Command, NodeFunctionCommand, R, Runner, ServerFunction
from coordinator.single_statement import function_logged_sql, lone


@dataclass(frozen=True)
class Retitle:
    """A command the coordinator has never heard of: a rename under another name."""

    ref: str
    title: str

    def apply(self, runner: Runner[R]) -> R:
        return Rename(self.ref, self.title).apply(runner)


def test_a_command_runs_alone_and_in_a_group_by_its_own_apply(coord: Coordinator,
                                                               ns: str) -> None:
    coord.mkdir(ns, "/d")
    command = cast(Command, Retitle("/d", "e"))
    statement = lone(ns, command, coord.settings)
    assert statement is not None and statement.sql == function_logged_sql(Rename.function)
    alone = coord.execute(ns, command)
    assert (alone.node.path, alone.seq is not None) == ("/e", True)
    grouped = coord.apply(ns, [cast(Command, Retitle("/e", "f")),
                               cast(Command, Retitle("/f", "g"))])
    assert [r.node.path for r in grouped] == ["/f", "/g"]
    assert [n.path for n in coord.walk(ns, "/")] == ["/", "/g"]


@dataclass(frozen=True)
class Tag(NodeFunctionCommand):
    """A command declared only here: a metadata write under another name. Its
    declaration is all the coordinator needs, alone and in a group."""

    ref: str
    metadata: dict[str, Any]
    if_version: int | None = None
    function: ClassVar[ServerFunction] = SetMetadata.function


def test_a_declared_command_runs_alone_and_in_a_group_from_its_declaration_alone(
    coord: Coordinator, ns: str
) -> None:
    coord.create_file(ns, "/f", "", {"a": 1})
    command = cast(Command, Tag("/f", {"b": 2}))
    statement = lone(ns, command, coord.settings)
    assert statement is not None
    assert statement.sql == function_logged_sql(SetMetadata.function)
    alone = coord.execute(ns, command)
    assert (alone.node.metadata, alone.node.version, alone.seq is not None) == (
        {"b": 2}, 2, True)
    grouped = coord.apply(ns, [cast(Command, Tag("/f", {"c": 3}, if_version=2)),
                               cast(Command, Tag("/f", {"d": 4}))])
    assert [r.node.metadata for r in grouped] == [{"c": 3}, {"d": 4}]
    with pytest.raises(Conflict):
        coord.execute(ns, cast(Command, Tag("/f", {}, if_version=1)))
    events, _ = coord.read_events(after=0, limit=100)
    assert [e.payload["metadata"] for e in events if e.type == "metadata_set"] == [
        {"b": 2}, {"c": 3}, {"d": 4}]


def test_no_runner_names_a_declared_command() -> None:
    """What a declared command needs is derived: no method of its name in ``TreeTx``'s
    own class body or ``LoneStatements``, no row of its own in the route table."""
    from coordinator.commands import COMMANDS
    from coordinator.single_statement import LoneStatements
    from coordinator.tree import TreeTx

    declared = [c for c in COMMANDS if issubclass(c, NodeFunctionCommand)]
    assert {c.__name__ for c in declared} >= {
        "WriteFile", "SetMetadata", "MergeMetadata", "Delete", "Move", "Rename"}
    for cls in declared:
        name = cls.__dataclass_fields__["op"].default
        assert name not in vars(TreeTx) and name not in vars(LoneStatements), name
        assert name not in vars(Runner), name


def _calls() -> dict[str, Any]:
    return {name: getattr(Runner, name) for name in vars(Runner) if not name.startswith("_")}


def test_every_runner_method_is_some_commands() -> None:
    """A runner method no command calls would be a rule without a command."""
    from coordinator.commands import COMMANDS

    called = set()

    class Recorder:
        def __getattr__(self, name: str) -> Any:
            called.add(name)
            return lambda *args: None

    samples: dict[type[Any], Any] = {}
    for cls in COMMANDS:
        fields = {f.name: "/x" for f in dataclasses.fields(cls) if f.name != "op"}
        samples[cls] = cls(**fields)
        samples[cls].apply(cast(Runner[None], Recorder()))
    assert called == set(_calls())


def test_a_command_with_no_statement_of_its_own_is_not_one(coord: Coordinator,
                                                            ns: str) -> None:
    """``LoneStatements`` gives each command's one statement (a copy's too: one event
    per node, in one block) and None for a ``mkdir -p`` (several creates)."""
    from coordinator.commands import Copy, Mkdir

    assert lone(ns, Copy("/a", "/"), coord.settings) is not None
    assert lone(ns, Mkdir("/a/b", parents=True), coord.settings) is None
    assert lone(ns, Mkdir("/a"), coord.settings) is not None
