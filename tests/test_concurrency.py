"""Concurrency claims of issue 2, with real concurrent clients on real PostgreSQL.

Threads share one ``Coordinator`` (one pool, so each call has its own connection);
the process variant gives every client its own interpreter and pool. Races start
at a ``threading.Barrier``; "truly overlapping" variants hold a transaction open
with ``coord.transaction()`` so the overlap does not depend on scheduling.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text
from tree_checks import (
    at_barrier,
    check_tree,
    db_state,
    outcome,
    run_threads,
    wait_for_lock_waiter,
)
from tree_checks import mover_process as _mover_process

from coordinator import (
    AlreadyExists,
    Conflict,
    Coordinator,
    CoordinatorError,
    InvalidMove,
    NotFound,
)

WAIT = 20.0  # upper bound for "completes while the other transaction is open"


# --------------------------------------------------------------- seed 001: /clinton


def seed_clinton(coord: Coordinator, ns: str) -> str:
    coord.create_namespace(ns)
    coord.mkdir(ns, "/clinton/projects/elasticsearch", parents=True)
    return coord.create_file(ns, "/clinton/projects/elasticsearch/README.txt", "hello").node.id


def assert_both_survived(coord: Coordinator, ns: str, readme_id: str) -> None:
    node = coord.get(ns, readme_id)
    assert node.path == "/bill/projects/elasticsearch/README.md"
    assert node.content == "hello"
    assert coord.stat(ns, "/bill/projects/elasticsearch/README.md").id == readme_id
    with pytest.raises(NotFound):
        coord.stat(ns, "/clinton")
    check_tree(coord, ns)


def test_clinton_vs_readme_both_open_at_once(coord: Coordinator) -> None:
    """Both renames run inside open transactions that meet at a barrier before either
    commits: they truly overlap, and both succeed and survive."""
    for rnd in range(10):
        ns = f"seed{rnd}"
        readme = seed_clinton(coord, ns)
        barrier = threading.Barrier(2, timeout=WAIT)

        def dir_rename(ns: str = ns, barrier: threading.Barrier = barrier) -> None:
            with coord.transaction(ns) as g:
                g.rename("/clinton", "bill")
                barrier.wait()

        def file_rename(ns: str = ns, barrier: threading.Barrier = barrier) -> None:
            with coord.transaction(ns) as g:
                g.rename("/clinton/projects/elasticsearch/README.txt", "README.md")
                barrier.wait()

        run_threads([dir_rename, file_rename] if rnd % 2 else [file_rename, dir_rename])
        assert_both_survived(coord, ns, readme)


def test_clinton_vs_readme_racing_at_a_barrier(coord: Coordinator) -> None:
    """Plain calls started together: the file is addressed by id, so whichever commits
    first, both succeed."""
    for rnd in range(10):
        ns = f"race{rnd}"
        readme = seed_clinton(coord, ns)
        barrier = threading.Barrier(2, timeout=WAIT)
        run_threads([
            at_barrier(barrier, coord.rename, ns, "/clinton", "bill"),
            at_barrier(barrier, coord.rename, ns, readme, "README.md"),
        ])
        assert_both_survived(coord, ns, readme)


def test_file_rename_by_path_completes_while_dir_rename_is_open(coord: Coordinator) -> None:
    readme = seed_clinton(coord, "t")
    done = threading.Event()
    with coord.transaction("t") as g:
        g.rename("/clinton", "bill")

        def file_rename() -> None:
            coord.rename("t", "/clinton/projects/elasticsearch/README.txt", "README.md")
            done.set()

        worker = threading.Thread(target=file_rename, daemon=True)
        worker.start()
        # The file rename must not wait for the open directory rename.
        assert done.wait(WAIT)
    worker.join()
    assert_both_survived(coord, "t", readme)


# ------------------------------------------------------------ seed 003: three races


def test_two_renames_of_one_directory(coord: Coordinator) -> None:
    """(a) One result wins entirely; the children never split between two names."""
    coord.create_namespace("t")
    for rnd in range(20):
        coord.mkdir("t", f"/d1/sub{rnd}", parents=True)
        for i in range(3):
            coord.create_file("t", f"/d1/f{i}")
        barrier = threading.Barrier(2, timeout=WAIT)
        a, b = run_threads([
            outcome(at_barrier(barrier, coord.rename, "t", "/d1", "x")),
            outcome(at_barrier(barrier, coord.rename, "t", "/d1", "y")),
        ])
        results = [a, b]
        winners = [r for r in results if not isinstance(r, CoordinatorError)]
        losers = [r for r in results if isinstance(r, CoordinatorError)]
        assert len(winners) == 1, results
        assert isinstance(losers[0], NotFound), results  # /d1 is gone once the winner commits
        name = winners[0].node.name
        names = {n.name for n in coord.listdir("t", "/")}
        assert names == {name}
        assert sorted(n.name for n in coord.listdir("t", f"/{name}")) == [
            "f0", "f1", "f2", f"sub{rnd}"
        ]
        check_tree(coord, "t")
        coord.delete("t", f"/{name}", recursive=True)


def test_rename_racing_a_deep_create(coord: Coordinator) -> None:
    """(b) Rename of /d1 racing a create under /d1/d2_3/: consistent tree; a created file is
    reachable under the new name. The create fails only if /d1 was already renamed."""
    coord.create_namespace("t")
    created = 0
    for rnd in range(20):
        coord.mkdir("t", "/d1/d2_3", parents=True)
        barrier = threading.Barrier(2, timeout=WAIT)
        ren, new = run_threads([
            outcome(at_barrier(barrier, coord.rename, "t", "/d1", "d1x")),
            outcome(at_barrier(barrier, coord.create_file, "t", f"/d1/d2_3/new{rnd}", "c")),
        ])
        assert not isinstance(ren, CoordinatorError), ren
        if isinstance(new, CoordinatorError):
            assert isinstance(new, NotFound), new
            assert [n.name for n in coord.listdir("t", "/d1x/d2_3")] == []
        else:
            created += 1
            assert coord.get("t", new.node.id).path == f"/d1x/d2_3/new{rnd}"
            assert coord.stat("t", f"/d1x/d2_3/new{rnd}").content == "c"
        check_tree(coord, "t")
        coord.delete("t", "/d1x", recursive=True)
    # Held open, the create is certain to overlap the rename, and still lands.
    coord.mkdir("t", "/d1/d2_3", parents=True)
    with coord.transaction("t") as g:
        g.rename("/d1", "d1x")
        r = run_threads([lambda: coord.create_file("t", "/d1/d2_3/held", "h")])[0]
    assert coord.get("t", r.node.id).path == "/d1x/d2_3/held"
    check_tree(coord, "t")


def test_two_creates_of_one_name(coord: Coordinator) -> None:
    """(c) Exactly one wins, the other gets AlreadyExists, whatever the kinds."""
    coord.create_namespace("t")
    coord.mkdir("t", "/dir")
    makers: list[Callable[[str], Any]] = [
        lambda p: coord.mkdir("t", p),
        lambda p: coord.create_file("t", p, "x"),
        lambda p: coord.mkdir("t", p, parents=True),
    ]
    for rnd in range(20):
        path = f"/dir/n{rnd}"
        barrier = threading.Barrier(2, timeout=WAIT)
        f1, f2 = makers[rnd % 3], makers[(rnd // 3) % 2]
        results = run_threads([
            outcome(at_barrier(barrier, f1, path)),
            outcome(at_barrier(barrier, f2, path)),
        ])
        errors = [r for r in results if isinstance(r, CoordinatorError)]
        # mkdir -p of an existing directory is a no-op success (seq None), not a second node.
        wins = [r for r in results if not isinstance(r, CoordinatorError) and r.seq is not None]
        assert len(wins) == 1, results
        for e in errors:
            assert isinstance(e, AlreadyExists), results
        assert [n.name for n in coord.listdir("t", "/dir")].count(f"n{rnd}") == 1
    check_tree(coord, "t")


# ------------------------------------------------------ disjoint subtrees, lock waits


def test_disjoint_subtrees_do_not_wait(coord: Coordinator) -> None:
    coord.create_namespace("t")
    coord.mkdir("t", "/a/x", parents=True)
    coord.mkdir("t", "/b/c", parents=True)
    coord.create_file("t", "/b/c/f", "old")
    done = threading.Event()

    def other_client() -> None:
        coord.rename("t", "/b/c", "c2")
        coord.create_file("t", "/b/new", "n")
        coord.write_file("t", "/b/c2/f", "new")
        coord.mkdir("t", "/b/d/e", parents=True)
        coord.rename("t", "/b", "b2")
        # Deep inside the directory whose rename is open: does not wait either.
        coord.create_file("t", "/a/x/deep", "d")
        coord.mkdir("t", "/a/x/deeper")
        done.set()

    with coord.transaction("t") as g:
        g.rename("/a", "a2")
        worker = threading.Thread(target=other_client, daemon=True)
        worker.start()
        assert done.wait(WAIT), "a change in a disjoint subtree waited for the open rename"
    worker.join()
    assert coord.stat("t", "/a2/x/deep").content == "d"
    assert coord.stat("t", "/a2/x/deeper").is_dir
    assert coord.stat("t", "/b2/c2/f").content == "new"
    check_tree(coord, "t")


def test_create_directly_in_a_renamed_directory_waits_for_commit(coord: Coordinator) -> None:
    coord.create_namespace("t")
    coord.mkdir("t", "/a")
    done = threading.Event()
    result: list[Any] = []

    def create() -> None:
        result.append(coord.create_file("t", "/a/f", "x"))
        done.set()

    with coord.transaction("t") as g:
        g.rename("/a", "a2")
        worker = threading.Thread(target=create, daemon=True)
        worker.start()
        wait_for_lock_waiter(coord)
        assert not done.is_set()  # it is waiting on the parent's row lock
    worker.join(WAIT)
    assert done.is_set()
    # It resolved /a before the rename committed and lands in the renamed directory.
    assert coord.get("t", result[0].node.id).path == "/a2/f"
    check_tree(coord, "t")


def test_lock_wait_ends_in_conflict(coord: Coordinator, database_url: str) -> None:
    coord.create_namespace("t")
    coord.mkdir("t", "/a")
    with Coordinator.connect(database_url, lock_timeout=0.3) as impatient:
        with coord.transaction("t") as g:
            g.rename("/a", "a2")
            before = db_state(coord, "t")
            with pytest.raises(Conflict):
                impatient.create_file("t", "/a/f")
            with pytest.raises(Conflict):
                impatient.rename("t", "/a", "a3")
            with pytest.raises(Conflict):
                impatient.delete("t", "/a")
            assert db_state(coord, "t") == before
        # After the commit the same client goes straight through.
        impatient.create_file("t", "/a2/f")
    check_tree(coord, "t")


# ------------------------------------------------------------------ opposing moves

N_DIRS = 20
ALLOWED = (InvalidMove, AlreadyExists, NotFound)


def make_dirs(coord: Coordinator, ns: str) -> tuple[str, list[str]]:
    coord.create_namespace(ns)
    root = coord.stat(ns, "/").id
    ids = [coord.mkdir(ns, f"/d{i:02}").node.id for i in range(N_DIRS)]
    for i in range(0, N_DIRS, 4):  # some files too, so moves carry payload
        coord.create_file(ns, f"/d{i:02}/file", "x")
    return root, ids


def move_into(coord: Coordinator, ns: str, node: str, into: str) -> Any:
    """Move directory ``node`` (by id) into directory ``into`` (by id); returns the
    result or the typed error."""
    try:
        name = coord.get(ns, node).name
        dst = coord.get(ns, into).path
        return coord.move(ns, node, f"{dst.rstrip('/')}/{name}")
    except ALLOWED as exc:
        return exc


def test_opposing_moves_threads(coord: Coordinator) -> None:
    ns = "t"
    root, ids = make_dirs(coord, ns)
    clients = 8
    stats: Counter[str] = Counter()
    lock = threading.Lock()

    def flatten() -> None:
        for d in ids:
            move_into(coord, ns, d, root)

    # A into B while B into A: pairs of clients, each pair on its own two directories.
    for _ in range(5):
        barrier = threading.Barrier(clients, timeout=WAIT)
        jobs = []
        for k in range(clients // 2):
            a, b = ids[2 * k], ids[2 * k + 1]
            jobs.append(at_barrier(barrier, move_into, coord, ns, a, b))
            jobs.append(at_barrier(barrier, move_into, coord, ns, b, a))
        results = run_threads(jobs)
        for k in range(0, clients, 2):
            ok = [r for r in results[k:k + 2] if not isinstance(r, Exception)]
            assert len(ok) == 1, results[k:k + 2]  # both at once would be a cycle
        check_tree(coord, ns)
        flatten()

    # Chains: A->B, B->C, C->A ... around a ring of all clients.
    for _ in range(5):
        barrier = threading.Barrier(clients, timeout=WAIT)
        ring = random.sample(ids, clients)
        jobs = [
            at_barrier(barrier, move_into, coord, ns, ring[i], ring[(i + 1) % clients])
            for i in range(clients)
        ]
        results = run_threads(jobs)
        assert any(isinstance(r, Exception) for r in results)  # a full ring would be a cycle
        check_tree(coord, ns)
        flatten()

    # Random moves among all directories (and the root), hundreds of them.
    def mover(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(40):
            src = rng.choice(ids)
            dst = rng.choice([*ids, root])
            r = move_into(coord, ns, src, dst)
            with lock:
                stats[type(r).__name__] += 1

    barrier = threading.Barrier(clients, timeout=WAIT)
    run_threads([at_barrier(barrier, mover, s) for s in range(clients)], timeout=120)
    assert sum(stats.values()) == clients * 40
    assert stats["MutationResult"] > 0 and stats["InvalidMove"] > 0, stats
    count = check_tree(coord, ns)
    with coord.engine.connect() as conn:  # diagnostic: deadlocks PostgreSQL broke for us
        deadlocks = conn.execute(text(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        )).scalar_one()
    print(f"random moves: {dict(stats)}; deadlocks detected so far: {deadlocks}")
    assert count == 1 + N_DIRS + N_DIRS // 4


@pytest.mark.slow
def test_opposing_moves_processes(coord: Coordinator, database_url: str) -> None:
    """The same storm from 8 separate processes ('spawn'), each with its own pool."""
    ns = "t"
    root, ids = make_dirs(coord, ns)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(8)
    queue = ctx.Queue()
    procs = [
        ctx.Process(
            target=_mover_process, args=(database_url, ns, ids, root, seed, 30, barrier, queue)
        )
        for seed in range(8)
    ]
    for p in procs:
        p.start()
    reports = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    total: Counter[str] = Counter()
    for rep in reports:
        assert "unexpected" not in rep, rep["unexpected"]
        total.update(rep)
    assert sum(total.values()) == 8 * 30
    assert total["MutationResult"] > 0, total
    assert check_tree(coord, ns) == 1 + N_DIRS + N_DIRS // 4


# ------------------------------------------------- a lone stat is one snapshot


def test_stats_during_ancestor_renames_see_one_state(coord: Coordinator) -> None:
    """A stat (one statement of its own) while other clients rename the directory above
    the file back and forth: by path, the file is found at the path asked or the path
    does not exist, never another node; by id, its path is one of the two it really
    has, never a mix of a state before and after a rename."""
    ns = "stats"
    coord.create_namespace(ns)
    coord.mkdir(ns, "/a/deep", parents=True)
    file_id = coord.create_file(ns, "/a/deep/f", "x").node.id
    stop = threading.Event()
    seen: Counter[str] = Counter()
    errors: list[BaseException] = []

    def renamer() -> None:
        try:
            while not stop.is_set():
                for src, dst in (("/a", "b"), ("/b", "a")):
                    coord.rename(ns, src, dst)
        except BaseException as exc:
            errors.append(exc)

    def reader(k: int) -> None:
        try:
            for i in range(300):
                path = ("/a/deep/f", "/b/deep/f")[(i + k) % 2]
                try:
                    node = coord.stat(ns, path)
                except NotFound:
                    seen["by path: not found"] += 1
                else:
                    assert (node.id, node.path) == (file_id, path)
                    seen["by path: found"] += 1
                node = coord.get(ns, file_id)
                assert node.path in ("/a/deep/f", "/b/deep/f"), node.path
                seen["by id"] += 1
        except BaseException as exc:
            errors.append(exc)

    renamers = [threading.Thread(target=renamer)]
    for t in renamers:
        t.start()
    try:
        run_threads([lambda k=k: reader(k) for k in range(4)])
    finally:
        stop.set()
        for t in renamers:
            t.join(WAIT)
    assert not errors, errors[:3]
    assert seen["by id"] == 1200
    # Both outcomes happened: the renames really overlapped the reads.
    assert seen["by path: found"] > 0 and seen["by path: not found"] > 0, seen
