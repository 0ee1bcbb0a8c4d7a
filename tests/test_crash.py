"""A client killed with SIGKILL inside a change leaves no partial change and no lock.

The child is a real separate process with its own Coordinator. It stops inside its
transaction and says so; the parent kills it. The server sees the client's socket
close, rolls the transaction back and releases its row locks at once (well before
``idle_in_transaction_session_timeout``, which is the backstop for a client that
hangs without its socket closing).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from sqlalchemy import text
from tree_checks import check_tree, db_state, wait_for_lock_waiter

from coordinator import Coordinator

ROOT = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent(
    """
    import sys, time
    from coordinator import Coordinator

    url, ns = sys.argv[1], sys.argv[2]
    with Coordinator.connect(url) as coord:
        with coord.transaction(ns) as g:
            g.rename("/victim", "renamed")
            g.write_file("/renamed/f0", "changed by the doomed client")
            for i in range(3):
                g.create_file(f"/renamed/new{i}", "x")
            g.mkdir("/elsewhere")
            print("inside", flush=True)
            time.sleep(600)
    """
)

WAITING_CHILD = textwrap.dedent(
    """
    import sys
    from coordinator import Coordinator

    url, ns = sys.argv[1], sys.argv[2]
    with Coordinator.connect(url) as coord:
        with coord.transaction(ns) as g:
            g.mkdir("/child-was-here")
            print("inside", flush=True)
            g.write_file("/victim/f0", "child")  # waits for the parent's row lock
    """
)


def start_child(database_url: str, ns: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, database_url, ns],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()  # blocks until the child is inside its transaction
    if line.strip() != "inside":
        child.kill()
        raise AssertionError(f"child failed: {line!r} {child.communicate(timeout=30)[1]}")
    return child


def victim_uuid(node_id: str) -> object:
    import uuid

    return uuid.UUID(node_id)


def backends(coord: Coordinator) -> int:
    with coord.engine.connect() as conn:
        return int(conn.execute(
            text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                 "AND state = 'idle in transaction'")
        ).scalar_one())


def test_client_killed_inside_a_rename_leaves_nothing(
    coord: Coordinator, database_url: str
) -> None:
    ns = "t"
    coord.create_namespace(ns)
    victim = coord.mkdir(ns, "/victim").node
    for i in range(3):
        coord.create_file(ns, f"/victim/f{i}", "original")
    _, cursor = coord.read_events(wait=5.0)
    before = db_state(coord, ns)

    child = start_child(database_url, ns)
    assert backends(coord) == 1  # the child's transaction is open, holding its locks
    os.kill(child.pid, signal.SIGKILL)
    child.communicate(timeout=30)  # reaps it and closes the pipes
    assert child.returncode == -signal.SIGKILL

    # The lock is gone: the same rename goes through right away. If the dead client's
    # row lock survived, this would wait out lock_timeout and raise Conflict.
    assert coord.settings.lock_timeout >= 5.0
    started = time.monotonic()
    result = coord.rename(ns, "/victim", "after")
    elapsed = time.monotonic() - started
    assert result.node.id == victim.id

    # Nothing of the dead transaction is visible: the tree and log are as before, plus
    # exactly our own rename.
    nodes, events = db_state(coord, ns)
    assert events[:-1] == before[1] and events[-1][2] == "moved"
    renamed = {r[0]: r for r in before[0]}
    renamed[victim_uuid(victim.id)] = (*renamed[victim_uuid(victim.id)][:2], "after",
                                       *renamed[victim_uuid(victim.id)][3:6], victim.version + 1)
    assert nodes == sorted(renamed.values())
    assert coord.stat(ns, "/after/f0").content == "original"
    assert [n.name for n in coord.listdir(ns, "/after")] == ["f0", "f1", "f2"]
    assert [n.name for n in coord.listdir(ns, "/")] == ["after"]
    # The reader is not held up by the dead transaction's hole and sees only our rename.
    new, _ = coord.read_events(after=cursor, wait=5.0)
    assert [(e.type, e.payload["path"]) for e in new] == [("moved", "/after")]
    check_tree(coord, ns)
    assert backends(coord) == 0
    # Diagnostic only (not a threshold): how long the rename waited for the dead lock.
    print(f"rename after kill -9 took {elapsed:.3f}s")


def test_client_killed_while_waiting_for_a_lock(coord: Coordinator, database_url: str) -> None:
    """The killed client was itself blocked (waiting for another client's lock): its
    waiting query ends with it, and the holder's work is unaffected."""
    ns = "t"
    coord.create_namespace(ns)
    coord.mkdir(ns, "/victim")
    coord.create_file(ns, "/victim/f0", "original")
    with coord.transaction(ns) as g:
        g.write_file("/victim/f0", "holder")  # the child's write_file will wait for this
        child = subprocess.Popen(
            [sys.executable, "-c", WAITING_CHILD, database_url, ns],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "inside"
        wait_for_lock_waiter(coord)
        os.kill(child.pid, signal.SIGKILL)
        child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL
    assert coord.stat(ns, "/victim/f0").content == "holder"
    assert [n.name for n in coord.listdir(ns, "/")] == ["victim"]
    check_tree(coord, ns)
