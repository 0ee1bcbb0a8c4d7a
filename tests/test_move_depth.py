"""The depth limit holds for directory moves, also for concurrent ones.

Creating a node checks the depth of its own path, but moving a directory takes its
whole subtree along: a deep chain moved under another deep chain used to end far past
the limit (1,530 levels with a limit of 255, in five moves), and every consumer's
cost grows with depth. A move whose subtree would end past ``max_depth`` is refused
with ``InvalidMove`` and writes nothing; two concurrent moves that each fit alone
but not together serialize on their row locks, and the second one counts the
first's result.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from tree_checks import wait_for_lock_waiter

from coordinator import Coordinator
from coordinator.errors import CoordinatorError, InvalidMove
from coordinator.results import MutationResult

LIMIT = 20
NS = "deep"


@pytest.fixture
def shallow(database_url: str) -> Iterator[Coordinator]:
    with Coordinator.connect(database_url, lock_timeout=10.0, max_depth=LIMIT) as c:
        c.create_namespace(NS)
        yield c


def chain(top: str, n: int) -> str:
    """``/top/top2/.../topN``: a directory chain of ``n`` levels under ``top``'s parent."""
    name = top.rsplit("/", 1)[-1]
    return top + "".join(f"/{name}{i}" for i in range(2, n + 1))


def max_depth(coord: Coordinator, ns: str = NS) -> int:
    """The deepest node of the namespace, by SQL on ``nodes`` (not through the API)."""
    with coord.engine.connect() as conn:
        depth: int = conn.execute(
            text(
                """
                WITH RECURSIVE t(id, depth) AS (
                    SELECT id, 0 FROM nodes WHERE namespace = :ns AND parent_id IS NULL
                  UNION ALL
                    SELECT n.id, t.depth + 1 FROM t
                    JOIN nodes n ON n.namespace = :ns AND n.parent_id = t.id
                )
                SELECT max(depth) FROM t
                """
            ),
            {"ns": ns},
        ).scalar_one()
    return depth


def event_count(coord: Coordinator) -> int:
    with coord.engine.connect() as conn:
        n: int = conn.execute(text("SELECT count(*) FROM events")).scalar_one()
    return n


def test_a_move_past_the_limit_is_refused_and_writes_nothing(shallow: Coordinator) -> None:
    a = chain("/a", 15)
    shallow.mkdir(NS, a, parents=True)
    x = chain("/x", 6)  # /x has 5 levels below it
    shallow.mkdir(NS, x, parents=True)
    before = ([n.path for n in shallow.walk(NS)], event_count(shallow))
    with pytest.raises(InvalidMove, match="deeper than 20"):
        shallow.move(NS, "/x", f"{a}/x")  # /x at 16, its deepest at 21
    assert ([n.path for n in shallow.walk(NS)], event_count(shallow)) == before
    # Exactly at the limit is fine, and a rename or a move that is not deeper never
    # counts the subtree.
    shallow.move(NS, "/x", f"{chain('/a', 14)}/x")
    assert max_depth(shallow) == LIMIT
    shallow.rename(NS, f"{chain('/a', 14)}/x", "y")
    shallow.move(NS, f"{chain('/a', 14)}/y", "/y")
    assert max_depth(shallow) == 15


def test_moving_a_file_or_an_empty_directory_to_the_limit(shallow: Coordinator) -> None:
    a = chain("/a", LIMIT - 1)
    shallow.mkdir(NS, a, parents=True)
    shallow.mkdir(NS, "/e")
    shallow.create_file(NS, "/f", "x")
    shallow.move(NS, "/e", f"{a}/e")
    shallow.move(NS, "/f", f"{a}/f")
    assert max_depth(shallow) == LIMIT


def _build_two_chains(coord: Coordinator) -> tuple[str, str, str]:
    """/a... (10 levels), /x... and /y... (6 levels each). Moving /x under the bottom of
    /a fits (16), moving /y under the bottom of /x fits (12); both together reach 22."""
    a, x, y = chain("/a", 10), chain("/x", 6), chain("/y", 6)
    for c in (a, x, y):
        coord.mkdir(NS, c, parents=True)
    return a, x, y


def _concurrently(coord: Coordinator, first: tuple[str, str], second: tuple[str, str]
                  ) -> MutationResult | CoordinatorError:
    """Hold ``first`` open in a group, let ``second`` run into its locks, commit ``first``;
    returns what ``second`` got."""
    outcome: list[MutationResult | CoordinatorError] = []

    def run_second() -> None:
        try:
            outcome.append(coord.move(NS, *second))
        except CoordinatorError as exc:
            outcome.append(exc)

    with coord.transaction(NS) as group:
        group.move(*first)
        thread = threading.Thread(target=run_second)
        thread.start()
        wait_for_lock_waiter(coord)
    thread.join(30)
    assert len(outcome) == 1
    return outcome[0]


def test_concurrent_moves_that_fit_alone_but_not_together_outer_first(
    shallow: Coordinator,
) -> None:
    """/x goes under /a (held open); /y under the bottom of /x waits for /x's row and then
    sees that /x's bottom is now at depth 16."""
    a, x, _ = _build_two_chains(shallow)
    got = _concurrently(shallow, ("/x", f"{a}/x"), ("/y", f"{x}/y"))
    assert isinstance(got, InvalidMove), got
    assert max_depth(shallow) == 16


def test_concurrent_moves_that_fit_alone_but_not_together_inner_first(
    shallow: Coordinator,
) -> None:
    """/y goes under the bottom of /x (held open, key share on /x); the move of /x under
    /a waits for /x's row and then counts /y's levels under it."""
    a, x, _ = _build_two_chains(shallow)
    got = _concurrently(shallow, ("/y", f"{x}/y"), ("/x", f"{a}/x"))
    assert isinstance(got, InvalidMove), got
    assert max_depth(shallow) == 12


def test_concurrent_random_directory_moves_never_pass_the_limit(database_url: str) -> None:
    """Threads, each with its own Coordinator (own connections), stack three chains of
    8 directories under each other's bottoms (or back under the root) at random for a few
    seconds. Two stacked fit (16), three do not (24): two concurrent moves that each fit
    when they start often do not fit together. The tree must never end past the limit,
    and the limit must have been hit."""
    seed = random.randrange(1 << 30)
    tops = {"p": "", "q": "", "r": ""}
    bottoms = []
    with Coordinator.connect(database_url, lock_timeout=10.0, max_depth=LIMIT) as setup:
        setup.create_namespace(NS)
        for top in tops:
            tops[top] = setup.mkdir(NS, f"/{top}").node.id
            bottoms.append(setup.mkdir(NS, chain(f"/{top}", 8), parents=True).node.id)
    stop = time.monotonic() + 6.0
    counts = {"moved": 0, "refused_depth": 0, "other": 0}
    deepest: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        rng = random.Random(seed + k)
        try:
            with Coordinator.connect(database_url, lock_timeout=10.0, max_depth=LIMIT) as c:
                while time.monotonic() < stop:
                    name = rng.choice(sorted(tops))
                    under = rng.choice([*bottoms, None])
                    try:
                        parent = "" if under is None else c.get(NS, under).path
                        c.move(NS, tops[name], f"{parent}/{name}")
                        kind = "moved"
                    except InvalidMove as exc:
                        kind = "refused_depth" if "deeper than" in str(exc) else "other"
                    except CoordinatorError:
                        kind = "other"  # into its own subtree, a stale path, a name taken
                    with lock:
                        counts[kind] += 1
                        if kind == "moved":
                            deepest.append(max_depth(c))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert max(deepest) <= LIMIT, (seed, counts, max(deepest))
    with Coordinator.connect(database_url) as check:
        assert max_depth(check) <= LIMIT, (seed, counts)
    assert counts["moved"] > 20 and counts["refused_depth"] > 0, (seed, counts)
