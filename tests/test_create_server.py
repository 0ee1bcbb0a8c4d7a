"""A lone create runs whole in the server (``pathkeeper_create``, one statement in
autocommit): the same result, event and errors as a create inside a group, its claim of
event positions after every lock wait, and one plan per connection."""

from __future__ import annotations

import threading
import time

from tree_checks import (
    assert_waiting_call_holds_no_positions,
    check_claim_after_call,
    plans_of,
)

from coordinator import (
    Coordinator,
    CoordinatorError,
)
from coordinator.event_reader import read_events
from coordinator.single_statement import CREATE_LOGGED_SQL


def _created_events(coord: Coordinator, ns: str) -> list[dict[str, object]]:
    events, _ = read_events(coord.engine, None, 10_000, namespaces=[ns])
    return [e.payload for e in events if e.type == "created"]


def test_lone_and_grouped_creates_answer_and_log_alike(coord: Coordinator) -> None:
    """The same creates alone and inside a group: the same nodes (but ids and times),
    the same events, the same refusals with the same messages."""
    payloads: dict[str, list[dict[str, object]]] = {}
    refusals: dict[str, list[tuple[str, str]]] = {}
    for how in ("alone", "grouped"):
        ns = f"c_{how}"
        coord.create_namespace(ns)

        def run(op: str, path: str, how: str = how, ns: str = ns) -> object:
            if how == "alone":
                if op == "mkdir":
                    return coord.mkdir(ns, path)
                return coord.create_file(ns, path, f"body of {path}", {"p": path})
            with coord.transaction(ns) as group:
                if op == "mkdir":
                    return group.mkdir(path)
                return group.create_file(path, f"body of {path}", {"p": path})

        made = [run("mkdir", "/d"), run("mkdir", "/d/e"), run("file", "/d/e/f"),
                run("file", "/g")]
        assert all(m.seq is not None for m in made)  # type: ignore[attr-defined]
        refusals[how] = []
        for op, path in [("file", "/d/e/f"), ("mkdir", "/d"), ("file", "/x/f"),
                         ("mkdir", "/d/e/f/g"), ("file", "/g/h/i"), ("file", "/d/x/y")]:
            try:
                run(op, path)
            except CoordinatorError as exc:
                refusals[how].append((type(exc).__name__, str(exc)))
        payloads[how] = [
            {k: v for k, v in p.items() if k not in ("id", "parent_id")}
            for p in _created_events(coord, ns)
        ]
        node = coord.stat(ns, "/d/e/f")
        assert (node.content, node.metadata, node.version) == (
            "body of /d/e/f", {"p": "/d/e/f"}, 1)
    assert payloads["alone"] == payloads["grouped"]
    assert [p["path"] for p in payloads["alone"]] == ["/d", "/d/e", "/d/e/f", "/g"]
    assert refusals["alone"] == refusals["grouped"] == [
        ("AlreadyExists", "/d/e/f already exists"),
        ("AlreadyExists", "/d already exists"),
        ("NotFound", "/x does not exist"),
        ("NotADirectory", "/d/e/f is a file"),
        ("NotADirectory", "/g is a file"),
        ("NotFound", "/d/x does not exist"),
    ]


def test_a_lone_create_waiting_for_its_parent_holds_no_positions(coord: Coordinator) -> None:
    """A create whose parent is locked by another transaction (a rename of it in an open
    group) waits inside the function, before its claim: while it waits it holds no
    position lock, so readers of the log do not wait for it; once the group commits it
    goes on under the renamed parent."""
    ns = "wait"
    coord.create_namespace(ns)
    coord.mkdir(ns, "/d")
    results: list[object] = []
    creator = threading.Thread(
        target=lambda: results.append(coord.create_file(ns, "/d/x", "body")), daemon=True
    )
    with coord.transaction(ns) as group:
        group.rename("/d", "e")  # holds /d's row FOR UPDATE until the group ends
        creator.start()
        assert_waiting_call_holds_no_positions(coord, "pathkeeper_create")
        # The group's own events are not claimed yet either: a reader returns at once.
        started = time.monotonic()
        read_events(coord.engine, None, 1000, namespaces=[ns])
        assert time.monotonic() - started < 5
    creator.join(20)
    assert len(results) == 1
    node = coord.stat(ns, "/e/x")
    assert node.content == "body"
    d_created, x_created = _created_events(coord, ns)
    assert (x_created["id"], x_created["parent_id"]) == (node.id, d_created["id"])


def test_lone_creates_reuse_one_plan(database_url: str) -> None:
    """Like the lone rename's, the lone create's statement is planned once per connection
    (``pathkeeper_create`` is declared to return one row)."""
    with Coordinator.connect(database_url, pool_size=1, max_overflow=0) as coord:
        coord.create_namespace("t")
        for i in range(30):
            coord.create_file("t", f"/f{i}")
        # As for the rename: custom plans for the first 5 prepared runs, then generic.
        assert plans_of(coord, "pathkeeper_create") == (20, 5)


def test_lone_create_claims_its_block_after_the_function(coord: Coordinator) -> None:
    """In the one-statement create the claim (transaction id, position lock, then
    ``nextval``) runs after ``pathkeeper_create`` inserted: checked on the plan, as for
    the lone rename."""
    params = [("ns", "text", "'t'"), ("parent", "text[]", "'{}'"),
              ("id", "uuid", "'00000000-0000-4000-8000-000000000000'"),
              ("name", "text", "'f'"), ("kind", "text", "'file'"), ("content", "text", "''"),
              ("md", "text", "'{}'"), ("path", "text", "'/f'")]
    check_claim_after_call(coord, CREATE_LOGGED_SQL, params, "pathkeeper_create",
                           "(r_1.id IS NOT NULL)")
