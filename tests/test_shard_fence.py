"""The shard fence (docs/sharding.md, "The fence"): a namespace frozen on this server
refuses every kind of write with nothing written, one that is not this server's (gone,
incoming) is ``NamespaceMoved``, other namespaces write on, and a writer in flight when
the freeze starts either commits before it or is refused. Real PostgreSQL; the races
with threads on their own connections."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from coordinator import Coordinator
from coordinator.commands import (
    Copy,
    CreateFile,
    Delete,
    Mkdir,
    Move,
    Rename,
    SetMetadata,
    WriteFile,
)
from coordinator.db import translate
from coordinator.errors import NamespaceFrozen, NamespaceMoved
from coordinator.results import POSITION_BLOCK


def place(coord: Coordinator, ns: str, state: str, frozen_at: int | None = None) -> None:
    """This server's fence row for ``ns``, as a move writes it."""
    with coord.engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO namespace_placement (namespace, state, frozen_at) "
            "VALUES (:ns, :st, :f) ON CONFLICT (namespace) DO UPDATE "
            "SET state = EXCLUDED.state, frozen_at = EXCLUDED.frozen_at"
        ), {"ns": ns, "st": state, "f": frozen_at})


def written(coord: Coordinator, ns: str) -> tuple[Any, ...]:
    """Everything of ``ns`` a write could leave behind: its nodes, events, namespace row."""
    with coord.engine.connect() as conn:
        nodes = conn.execute(text(
            "SELECT id, parent_id, name, kind, content, metadata, version FROM nodes "
            "WHERE namespace = :ns ORDER BY id"), {"ns": ns}).all()
        events = conn.execute(text(
            "SELECT position FROM events WHERE namespace = :ns ORDER BY position"),
            {"ns": ns}).scalars().all()
        names = conn.execute(text("SELECT name FROM namespaces WHERE name = :ns"),
                             {"ns": ns}).scalars().all()
    return tuple(map(tuple, nodes)), tuple(events), tuple(names)


def seed(coord: Coordinator, ns: str) -> str:
    coord.create_namespace(ns)
    coord.mkdir(ns, "/d")
    coord.mkdir(ns, "/e")
    return coord.create_file(ns, "/d/f", "one").node.id


def every_write(coord: Coordinator, ns: str, fid: str) -> dict[str, Callable[[], object]]:
    """One call of each kind of write on ``ns`` (by path and by id, lone and grouped)."""

    def group() -> None:
        with coord.transaction(ns) as tx:
            tx.mkdir("/g")
            tx.rename("/e", "e2")

    return {
        "mkdir": lambda: coord.mkdir(ns, "/x"),
        "create_file": lambda: coord.create_file(ns, "/d/new", "c"),
        "write_file": lambda: coord.write_file(ns, "/d/f", "two"),
        "write_file by id": lambda: coord.execute(ns, WriteFile(fid, "two")),
        "set_metadata": lambda: coord.set_metadata(ns, "/d/f", {"k": 1}),
        "rename": lambda: coord.rename(ns, "/d/f", "g"),
        "rename by id": lambda: coord.execute(ns, Rename(fid, "g")),
        "move": lambda: coord.move(ns, "/d/f", "/e/f"),
        "delete": lambda: coord.delete(ns, "/d/f"),
        "delete recursive": lambda: coord.execute(ns, Delete("/d", recursive=True)),
        "copy": lambda: coord.execute(ns, Copy("/d", "/e")),
        "group": group,
        "apply": lambda: coord.apply(ns, [Mkdir("/y"), CreateFile("/y/z", "c"),
                                          SetMetadata("/y/z", {"a": 1}), Move("/y", "/e/y")]),
        "import": lambda: coord.import_nodes(
            ns, [b'{"path": "/i/j", "kind": "file", "content": "c"}\n']),
        "drop namespace": lambda: coord.drop_namespace(ns, force=True),
    }


def test_a_frozen_namespace_refuses_every_write_and_writes_nothing(coord: Coordinator) -> None:
    fid = seed(coord, "t")
    place(coord, "t", "frozen", frozen_at=0)
    before = written(coord, "t")
    for kind, call in every_write(coord, "t", fid).items():
        with pytest.raises(NamespaceFrozen, match="being moved"):
            call()
        assert written(coord, "t") == before, kind
    # A create is fenced too (by the claim: it calls no server function).
    place(coord, "u", "frozen", frozen_at=0)
    with pytest.raises(NamespaceFrozen):
        coord.create_namespace("u")
    assert written(coord, "u") == ((), (), ())
    # Reads go on.
    assert coord.stat("t", "/d/f").content == "one"
    # Other namespaces write on: every kind, the same calls, each on a fresh namespace.
    for k, kind in enumerate(every_write(coord, "t", fid)):
        other = f"o{k}"
        other_fid = seed(coord, other)
        start = written(coord, other)
        every_write(coord, other, other_fid)[kind]()
        assert written(coord, other) != start, kind


@pytest.mark.parametrize("state", ["gone", "incoming"])
def test_a_namespace_not_on_this_server_is_moved(coord: Coordinator, state: str) -> None:
    fid = seed(coord, "t")
    place(coord, "t", state)
    before = written(coord, "t")
    for kind, call in every_write(coord, "t", fid).items():
        with pytest.raises(NamespaceMoved, match="not on this server"):
            call()
        assert written(coord, "t") == before, kind
    # A namespace a move is copying here (or moved away) cannot be created here either.
    place(coord, "u", state)
    with pytest.raises(NamespaceMoved):
        coord.create_namespace("u")
    assert written(coord, "u") == ((), (), ())


def freeze(coord: Coordinator, ns: str) -> int:
    """The freeze as a move runs it: its own transaction, committed."""
    try:
        with coord.engine.begin() as conn:
            return int(conn.execute(text("SELECT pathkeeper_freeze_namespace(:ns)"),
                                    {"ns": ns}).scalar_one())
    except DBAPIError as exc:
        raise translate(exc) from exc


def placement(coord: Coordinator, ns: str) -> tuple[str, int | None] | None:
    with coord.engine.connect() as conn:
        row = conn.execute(text("SELECT state, frozen_at FROM namespace_placement "
                                "WHERE namespace = :ns"), {"ns": ns}).first()
    return None if row is None else (str(row.state), row.frozen_at)


def test_freeze_returns_the_last_block_and_unfreeze_reopens(coord: Coordinator) -> None:
    seed(coord, "t")
    last = coord.mkdir("t", "/late").seq
    assert last is not None
    with coord.engine.connect() as conn:
        last_value = int(conn.execute(text("SELECT last_value FROM event_position_seq"))
                         .scalar_one())
    l_s = freeze(coord, "t")
    assert l_s == last_value
    assert placement(coord, "t") == ("frozen", l_s + POSITION_BLOCK - 1)
    assert last <= l_s + POSITION_BLOCK - 1
    # Others move the sequence on; a second freeze (a move resumed) keeps the first L_s.
    seed(coord, "o")
    assert freeze(coord, "t") == l_s
    assert placement(coord, "t") == ("frozen", l_s + POSITION_BLOCK - 1)
    with pytest.raises(NamespaceFrozen):
        coord.mkdir("t", "/refused")
    with coord.engine.begin() as conn:
        assert conn.execute(text("SELECT pathkeeper_unfreeze_namespace('t')")).scalar_one()
        assert not conn.execute(text("SELECT pathkeeper_unfreeze_namespace('t')")).scalar_one()
    assert placement(coord, "t") is None
    assert coord.mkdir("t", "/again").seq is not None
    # Not this server's: neither frozen nor reopened.
    place(coord, "t", "gone")
    with pytest.raises(NamespaceMoved):
        freeze(coord, "t")
    with coord.engine.begin() as conn:
        assert not conn.execute(text("SELECT pathkeeper_unfreeze_namespace('t')")).scalar_one()
    assert placement(coord, "t") == ("gone", None)


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_the_freeze_waits_for_a_writer_in_flight(coord: Coordinator) -> None:
    """A group that passed the fence before the freeze began commits, and the freeze
    waits for it; its event is at or below frozen_at."""
    seed(coord, "t")
    inside, release = threading.Event(), threading.Event()

    def writer() -> Any:
        with coord.transaction("t") as tx:
            tx.mkdir("/in-flight")
            inside.set()
            release.wait(10)
        return coord.stat("t", "/in-flight")

    w, wrote = _in_thread(writer)
    assert inside.wait(10)
    f, froze = _in_thread(lambda: freeze(coord, "t"))
    time.sleep(0.5)
    assert f.is_alive(), "the freeze did not wait for the writer in flight"
    release.set()
    w.join(10)
    f.join(10)
    assert "error" not in wrote and "error" not in froze, (wrote, froze)
    with coord.engine.connect() as conn:
        last = conn.execute(text("SELECT max(position) FROM events WHERE namespace = 't'"))
        assert int(last.scalar_one()) <= froze["value"] + POSITION_BLOCK - 1
    with pytest.raises(NamespaceFrozen):
        coord.mkdir("t", "/after")


def test_a_writer_that_comes_during_the_freeze_waits_then_is_refused(
    coord: Coordinator,
) -> None:
    """The freeze's transaction is still open: a write of the namespace waits for it,
    then reads 'frozen' (a statement after its lock, so a snapshot after the commit)
    and is refused with nothing written. A write of another namespace does not wait."""
    seed(coord, "t")
    seed(coord, "o")
    before = written(coord, "t")
    with coord.engine.connect() as freezer:
        freezer.execute(text("SELECT pathkeeper_freeze_namespace('t')"))
        calls: list[Callable[[], object]] = [
            lambda: coord.mkdir("t", "/x"),                      # server function
            lambda: coord.drop_namespace("t", force=True),       # group of statements
            lambda: coord.import_nodes("t", [b'{"path": "/i", "kind": "dir"}\n']),
        ]
        threads = [_in_thread(c) for c in calls]
        assert coord.mkdir("o", "/free").seq is not None  # not held up by the freeze
        time.sleep(0.5)
        assert all(t.is_alive() for t, _ in threads), "a writer did not wait for the freeze"
        freezer.commit()
    for t, out in threads:
        t.join(10)
        assert isinstance(out.get("error"), NamespaceFrozen), out
    assert written(coord, "t") == before


def test_writers_racing_a_freeze_commit_before_it_or_are_refused(coord: Coordinator) -> None:
    """Four threads write the namespace as fast as they can (lone renames, groups,
    creates) while the freeze runs: every write acknowledged has its event at or below
    frozen_at, every event of the namespace is an acknowledged write, and after the
    freeze every write is refused."""
    seed(coord, "t")
    for i in range(4):
        coord.create_file("t", f"/d/w{i}", "x")
    stop = threading.Event()
    acked: list[int] = []
    refused: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def hammer(i: int) -> None:
        n = 0
        name = f"w{i}"
        while not stop.is_set():
            n += 1
            try:
                if n % 3 == 0:
                    with coord.transaction("t") as tx:
                        tx.mkdir(f"/e/g{i}-{n}")
                        tx.write_file(f"/d/{name}", str(n))
                    got = coord.stat("t", f"/e/g{i}-{n}").version
                    seq = None
                else:
                    new = f"w{i}-{n}"
                    seq = coord.rename("t", f"/d/{name}", new).seq
                    name = new
                with lock:
                    acked.append(seq if seq is not None else -got)
            except NamespaceFrozen:
                with lock:
                    refused.append(i)
                time.sleep(0.01)
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=hammer, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    l_s = freeze(coord, "t")
    acked_at_freeze = len(acked)
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(10)
    assert not errors, errors
    assert refused, "no write was refused after the freeze"
    # Writes acknowledged after the freeze returned: at most the ones that were already
    # past the fence (committing) when freeze() returned to this thread.
    assert len(acked) - acked_at_freeze <= 4
    with coord.engine.connect() as conn:
        events = conn.execute(text(
            "SELECT position, type FROM events WHERE namespace = 't' ORDER BY position"
        )).all()
    assert max(p for p, _ in events) <= l_s + POSITION_BLOCK - 1
    lone = [s for s in acked if s > 0]
    assert set(lone) <= {p for p, _ in events}
    # No write committed that was not acknowledged: each rename is one event, each group
    # two (mkdir, write), and seed made 1 + 2 + 1 + 4.
    groups = len(acked) - len(lone)
    assert len(events) == 8 + len(lone) + 2 * groups
