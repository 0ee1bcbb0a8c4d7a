"""Each write rule runs in one place, the server's ``pathkeeper_*`` function, whether the
command is a whole transaction or a step of a group.

Checked against the database itself: each function is wrapped (in this test's own
database) by one of the same signature that notes its call in a table and then runs the
original, so a Python path that re-implements a rule instead of calling the function
leaves no note.
"""

from __future__ import annotations

from collections import Counter
from functools import partial

import pytest
from sqlalchemy import text

from coordinator import AlreadyExists, Coordinator, NotFound
from coordinator.commands import CreateFile, Mkdir, WriteFile


def _wrap(coord: Coordinator, function: str) -> None:
    """Replace ``function`` by a wrapper that notes each call in ``rule_calls``."""
    with coord.engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS rule_calls (name text NOT NULL)"))
        args, result, nargs = conn.execute(text(
            "SELECT pg_get_function_arguments(oid), pg_get_function_result(oid), pronargs "
            "FROM pg_proc WHERE proname = :f AND pronamespace = 'public'::regnamespace"
        ), {"f": function}).one()
        conn.execute(text(f"ALTER FUNCTION {function} RENAME TO {function}_wrapped"))
        call = ", ".join(f"${i}" for i in range(1, nargs + 1))
        conn.execute(text(
            f"CREATE FUNCTION {function}({args}) RETURNS {result} LANGUAGE sql AS $w$ "
            f"INSERT INTO rule_calls VALUES ('{function}'); "
            f"SELECT * FROM {function}_wrapped({call}) $w$"
        ))


def _calls(coord: Coordinator) -> Counter[str]:
    with coord.engine.begin() as conn:
        names = conn.execute(text("DELETE FROM rule_calls RETURNING name")).scalars()
        return Counter(names)


def test_creates_in_a_group_run_the_server_rule(coord: Coordinator) -> None:
    """A create inside a group (file, directory, and each directory ``mkdir -p`` makes)
    is a call of ``pathkeeper_create``, as a lone create is: no parent check of Python's
    beside it."""
    coord.create_namespace("g")
    _wrap(coord, "pathkeeper_create")
    coord.mkdir("g", "/lone")
    assert _calls(coord) == {"pathkeeper_create": 1}
    with coord.transaction("g") as group:
        group.mkdir("/d")
        group.create_file("/d/f", "body")
    assert _calls(coord) == {"pathkeeper_create": 2}
    coord.apply("g", [Mkdir("/a/b/c", parents=True), CreateFile("/a/b/c/f")])
    assert _calls(coord) == {"pathkeeper_create": 4}
    assert [n.path for n in coord.walk("g")] == [
        "/", "/a", "/a/b", "/a/b/c", "/a/b/c/f", "/d", "/d/f", "/lone"]


def test_dropping_a_namespace_locks_its_root_with_the_server_rule(coord: Coordinator) -> None:
    """The lock ``drop_namespace`` takes on the root is ``pathkeeper_lock``'s, the one
    every server-side mutation takes."""
    coord.create_namespace("gone")
    coord.mkdir("gone", "/d")
    _wrap(coord, "pathkeeper_lock")
    result = coord.drop_namespace("gone", force=True)
    assert _calls(coord) == {"pathkeeper_lock": 1}
    assert result.node.path == "/"
    assert "gone" not in coord.namespaces()


def test_one_wording_per_error(coord: Coordinator) -> None:
    """An error reads the same whichever path raised it: a node id that is no node (well
    formed or not) alone, in a group, by stat; a name taken, in full path form."""
    coord.create_namespace("w")
    coord.mkdir("w", "/d")
    coord.create_file("w", "/d/f")
    for ref in ("not-a-uuid", "0f0e0d0c-0b0a-4908-8706-050403020100"):
        said = []
        for run in (
            partial(coord.stat, "w", ref),
            partial(coord.write_file, "w", ref, "x"),
            partial(coord.apply, "w", [Mkdir("/e"), WriteFile(ref, "x")]),
        ):
            with pytest.raises(NotFound) as info:
                run()
            said.append(str(info.value))
        assert said == [f"no node with id {ref}"] * 3
    for run in (
        lambda: coord.create_file("w", "/d/f"),
        lambda: coord.apply("w", [Mkdir("/e"), CreateFile("/d/f")]),
        lambda: coord.apply("w", [Mkdir("/e"), Mkdir("/d/f", parents=True)]),
    ):
        with pytest.raises(AlreadyExists) as taken:
            run()
        assert str(taken.value).startswith("/d/f ")
