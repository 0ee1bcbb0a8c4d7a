"""The server-side functions share their rules: the same cause gives the same SQLSTATE
and the same full-path wording from every ``pathkeeper_*`` function, called as SQL (the
helpers ``pathkeeper_walk_path``, ``pathkeeper_check_version``,
``pathkeeper_check_name_free`` and ``pathkeeper_lock`` of ``coordinator/sql``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from coordinator import Coordinator

_CALLS = {
    "create": "SELECT * FROM pathkeeper_create(%s, %s::text[], gen_random_uuid(), %s, "
              "'file', '', '{}')",
    "rename": "SELECT * FROM pathkeeper_rename(%s, 'ref', %s::text[], NULL, %s, %s::bigint)",
    "move": "SELECT * FROM pathkeeper_move(%s, 'ref', %s::text[], NULL, %s::text[], %s, "
            "%s::bigint, 100)",
    "delete": "SELECT * FROM pathkeeper_delete(%s, 'ref', %s::text[], NULL, true, %s::bigint)",
    "write": "SELECT * FROM pathkeeper_write(%s, 'ref', %s::text[], NULL, 'x', NULL, "
             "%s::bigint)",
    "set_metadata": "SELECT * FROM pathkeeper_set_metadata(%s, 'ref', %s::text[], NULL, "
                    "'{}', %s::bigint)",
}


def _target(call: str, parts: list[str]) -> tuple[Any, ...]:
    """The arguments of ``call`` naming ``parts`` as its node (or its parent, for a
    create), changing nothing else."""
    return {
        "create": ("t", parts, "new"),
        "rename": ("t", parts, "new", None),
        "move": ("t", parts, ["d"], "new", None),
        "delete": ("t", parts, None),
        "write": ("t", parts, None),
        "set_metadata": ("t", parts, None),
    }[call]


_NODE_CALLS = ["rename", "move", "delete", "write", "set_metadata"]
_PATH_CALLS = [*_NODE_CALLS, "create"]

_CASES: list[tuple[str, tuple[Any, ...], str, str]] = [
    # The path walk: every function that takes a path.
    *[(c, _target(c, ["d", "x", "y"]), "PK001", "/d/x does not exist")
      for c in _PATH_CALLS],
    *[(c, _target(c, ["d", "f", "y"]), "PK002", "/d/f is a file")
      for c in _PATH_CALLS],
    *[(c, ("nope", *_target(c, ["d"])[1:]), "PK001", "no namespace 'nope'")
      for c in _PATH_CALLS],
    ("create", _target("create", ["d", "f"]), "PK002", "/d/f is a file"),
    ("move", ("t", ["d", "f"], ["x"], "g", None), "PK001", "/x does not exist"),
    ("move", ("t", ["d", "e"], ["d", "f"], "g", None), "PK002", "/d/f is a file"),
    # The version check: every function that changes a node.
    ("rename", ("t", ["d", "f"], "g", 9), "PK004", "version is 1, expected 9"),
    ("move", ("t", ["d", "f"], ["d"], "g", 9), "PK004", "version is 1, expected 9"),
    ("delete", ("t", ["d", "f"], 9), "PK004", "version is 1, expected 9"),
    ("write", ("t", ["d", "f"], 9), "PK004", "version is 1, expected 9"),
    ("set_metadata", ("t", ["d", "f"], 9), "PK004", "version is 1, expected 9"),
    # A taken name, with the path it would have had: every function that names a node.
    ("create", ("t", ["d"], "e"), "23505", "/d/e already exists"),
    ("rename", ("t", ["d", "f"], "e", None), "23505", "/d/e already exists"),
    ("move", ("t", ["d", "f"], ["d"], "e", None), "23505", "/d/e already exists"),
]


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A namespace ``t`` with /d, /d/e (directories) and /d/f (a file)."""
    with Coordinator.connect(database_url) as coord:
        coord.create_namespace("t")
        coord.mkdir("t", "/d")
        coord.mkdir("t", "/d/e")
        coord.create_file("t", "/d/f", "body")
    with psycopg.connect(database_url) as c:
        yield c


@pytest.mark.parametrize(("call", "args", "state", "message"), _CASES,
                         ids=[f"{c[0]}-{c[3]}" for c in _CASES])
def test_one_cause_one_error(conn: psycopg.Connection[Any], call: str, args: tuple[Any, ...],
                             state: str, message: str) -> None:
    with pytest.raises(psycopg.Error) as info:
        conn.execute(_CALLS[call].encode(), args)
    conn.rollback()
    assert (info.value.sqlstate, info.value.diag.message_primary) == (state, message)


def test_the_same_calls_succeed_on_a_free_name(conn: psycopg.Connection[Any]) -> None:
    """Not vacuous: the calls above are well formed and change the tree when allowed."""
    conn.execute(_CALLS["create"].encode(), ("t", ["d"], "g"))
    conn.execute(_CALLS["rename"].encode(), ("t", ["d", "g"], "h", 1))
    row = conn.execute(_CALLS["move"].encode(), ("t", ["d", "h"], [], "i", 2)).fetchone()
    assert row is not None and row[-2:] == ("/i", True)  # path, changed
    conn.execute(_CALLS["write"].encode(), ("t", ["i"], 3))
    conn.execute(_CALLS["set_metadata"].encode(), ("t", ["i"], 4))
    gone = conn.execute(_CALLS["delete"].encode(), ("t", ["i"], 5)).fetchone()
    assert gone is not None and gone[-2:] == ("/i", 1)  # path, count
