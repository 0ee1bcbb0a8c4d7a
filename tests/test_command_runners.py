"""Each command says how it runs, alone and in a group, through ``Command.apply`` on a
``commands.Runner``: the coordinator keeps no list of command classes of its own."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, cast

from coordinator import Coordinator
from coordinator.commands import Command, R, Runner
from coordinator.single_statement import RENAME_LOGGED_SQL, lone


@dataclass(frozen=True)
class Retitle:
    """A command the coordinator has never heard of: a rename under another name."""

    ref: str
    title: str

    def apply(self, runner: Runner[R]) -> R:
        return runner.rename(self.ref, self.title, None)


def test_a_command_runs_alone_and_in_a_group_by_its_own_apply(coord: Coordinator,
                                                               ns: str) -> None:
    coord.mkdir(ns, "/d")
    command = cast(Command, Retitle("/d", "e"))
    statement = lone(ns, command, coord.settings)
    assert statement is not None and statement.sql == RENAME_LOGGED_SQL  # one statement
    alone = coord.execute(ns, command)
    assert (alone.node.path, alone.seq is not None) == ("/e", True)
    grouped = coord.apply(ns, [cast(Command, Retitle("/e", "f")),
                               cast(Command, Retitle("/f", "g"))])
    assert [r.node.path for r in grouped] == ["/f", "/g"]
    assert [n.path for n in coord.walk(ns, "/")] == ["/", "/g"]


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
    """``LoneStatements`` names only the commands that are one statement: any other
    (a copy, one event per node) is None by default, with no method to write."""
    from coordinator.commands import Copy, Mkdir
    from coordinator.single_statement import LoneStatements

    assert "copy" not in vars(LoneStatements)
    assert lone(ns, Copy("/a", "/"), coord.settings) is None
    assert lone(ns, Mkdir("/a/b", parents=True), coord.settings) is None
    assert lone(ns, Mkdir("/a"), coord.settings) is not None
    statements = LoneStatements(ns, coord.settings)
    try:
        statements.not_a_command  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError:
        pass
    else:
        raise AssertionError("a name that is no command's must stay an AttributeError")
