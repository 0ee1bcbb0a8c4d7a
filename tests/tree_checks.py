"""Shared test helpers: direct SQL views of the tables and a thread runner that re-raises.

They read the tables with plain SQL, deliberately not through the Coordinator, so
that a claim about the tree is checked independently of the code under test.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from sqlalchemy import Connection, Engine, event, text

from coordinator import Coordinator
from coordinator.event_appender import POSITION_LOCK_SQL, POSITION_LOCK_TABLE
from coordinator.unit_of_work import UnitOfWork
from pathkeeper.local.bulk_tree import bulk_subtree

REACHABLE_SQL = text(
    """
    WITH RECURSIVE reach(id, depth) AS (
        SELECT id, 0 FROM nodes WHERE namespace = :ns AND parent_id IS NULL
      UNION ALL
        SELECT n.id, r.depth + 1 FROM reach r
        JOIN nodes n ON n.namespace = :ns AND n.parent_id = r.id
        WHERE r.depth < 10000
    )
    SELECT count(*) AS reached, count(DISTINCT id) AS distinct_ids, max(depth) AS depth
    FROM reach
    """
)


def node_rows(coord: Coordinator, ns: str) -> list[tuple[Any, ...]]:
    """Every row of the namespace's nodes, sorted: a snapshot to compare before/after."""
    with coord.engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                text(
                    "SELECT id, parent_id, name, kind, content, metadata, version "
                    "FROM nodes WHERE namespace = :ns ORDER BY id"
                ),
                {"ns": ns},
            )
        ]


def event_rows(coord: Coordinator) -> list[tuple[Any, ...]]:
    """Every row of the event log, by position."""
    with coord.engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                text("SELECT position, namespace, type, node_id, payload FROM events "
                     "ORDER BY position")
            )
        ]


def db_state(coord: Coordinator, ns: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    return node_rows(coord, ns), event_rows(coord)


def check_tree(coord: Coordinator, ns: str) -> int:
    """Assert the namespace is one tree: every row reachable from the single root exactly
    once (so no cycle, no detached subtree), sibling names unique, and ``walk`` agrees.
    Returns the number of nodes."""
    with coord.engine.connect() as conn:
        total = conn.execute(
            text("SELECT count(*) FROM nodes WHERE namespace = :ns"), {"ns": ns}
        ).scalar_one()
        roots = conn.execute(
            text("SELECT count(*) FROM nodes WHERE namespace = :ns AND parent_id IS NULL"),
            {"ns": ns},
        ).scalar_one()
        reach = conn.execute(REACHABLE_SQL, {"ns": ns}).one()
        dup_names = conn.execute(
            text(
                "SELECT parent_id, name FROM nodes WHERE namespace = :ns "
                "GROUP BY parent_id, name HAVING count(*) > 1"
            ),
            {"ns": ns},
        ).all()
    assert roots == 1
    # A cycle would be unreachable from the root (each node has one parent), so it
    # shows up as reached < total; a node reached twice would mean a broken adjacency.
    assert reach.reached == total, f"{total - reach.reached} nodes do not reach the root"
    assert reach.distinct_ids == total
    assert dup_names == []
    walked = list(coord.walk(ns))
    assert len(walked) == total
    assert len({n.path for n in walked}) == total
    return int(total)


def at_barrier(barrier: threading.Barrier, fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    """A thread body that waits at ``barrier`` and then calls ``fn(*args)``."""

    def go() -> Any:
        barrier.wait()
        return fn(*args)

    return go


def run_threads(targets: Sequence[Callable[[], Any]], timeout: float = 60.0) -> list[Any]:
    """Run each target in its own thread; return their results in order, re-raising the
    first exception (so a failure in a thread fails the test, with its traceback)."""
    results: list[Any] = [None] * len(targets)
    errors: list[BaseException | None] = [None] * len(targets)

    def wrap(i: int, fn: Callable[[], Any]) -> None:
        try:
            results[i] = fn()
        except BaseException as exc:  # handed to the main thread below
            errors[i] = exc

    threads = [
        threading.Thread(target=wrap, args=(i, fn), daemon=True) for i, fn in enumerate(targets)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a thread did not finish in time (deadlock or lost wake-up?)"
    for e in errors:
        if e is not None:
            raise e
    return results


def outcome(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Wrap ``fn`` so that it returns its result or the CoordinatorError it raised
    (anything else still propagates)."""
    from coordinator.errors import CoordinatorError

    def call() -> Any:
        try:
            return fn()
        except CoordinatorError as exc:
            return exc

    return call


def mover_process(
    url: str, ns: str, ids: list[str], root: str, seed: int, moves: int,
    barrier: Any, queue: Any,
) -> None:
    """Body of one client process of the opposing-moves storm (spawned, so it must live
    in an importable module): random directory moves, outcome counts sent to ``queue``."""
    import random
    from collections import Counter

    from coordinator.errors import AlreadyExists, InvalidMove, NotFound

    rng = random.Random(1000 + seed)
    counts: Counter[str] = Counter()
    unexpected: list[str] = []
    with Coordinator.connect(url, lock_timeout=5.0, pool_size=2) as coord:
        barrier.wait()
        for _ in range(moves):
            src, dst = rng.choice(ids), rng.choice([*ids, root])
            try:
                name = coord.get(ns, src).name
                where = coord.get(ns, dst).path.rstrip("/")
                coord.move(ns, src, f"{where}/{name}")
                counts["MutationResult"] += 1
            except (InvalidMove, AlreadyExists, NotFound) as exc:
                counts[type(exc).__name__] += 1
            except Exception as exc:  # reported to the parent, which fails the test
                unexpected.append(repr(exc))
    report: dict[str, Any] = dict(counts)
    if unexpected:
        report["unexpected"] = unexpected
    queue.put(report)


def wait_for_lock_waiter(coord: Coordinator, deadline: float = 20.0) -> None:
    """Block until some session of this database waits for a row lock (pg_stat_activity),
    i.e. until the blocked call is really inside the database, waiting."""
    end = time.monotonic() + deadline
    with coord.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        while time.monotonic() < end:
            waiting = conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
            if waiting:
                return
            time.sleep(0.01)
    raise AssertionError("no session started waiting for a lock")


def assert_waiting_call_holds_no_positions(coord: Coordinator, function: str) -> None:
    """Once a one-statement write waits for a row lock: it is the one call of ``function``
    waiting, and it holds no position lock (its claim comes after every lock wait), so
    readers of the log do not wait for it."""
    wait_for_lock_waiter(coord)
    with coord.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        waiting = conn.execute(text(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE :like"
        ), {"like": f"%{function}(%"}).scalars().all()
        assert len(waiting) == 1, waiting
        held = conn.execute(text(
            "SELECT count(*) FROM pg_locks WHERE pid = :pid AND locktype = 'relation' "
            "AND relation = CAST(:table AS regclass) AND granted"
        ), {"pid": waiting[0], "table": POSITION_LOCK_TABLE}).scalar_one()
    assert held == 0


@contextmanager
def writer_holding_its_block(coord: Coordinator, ns: str, path: str) -> Iterator[int]:
    """A writer (in a thread, with its own pooled connection) that made ``path`` and took
    its block of positions, and stays open until the block ends, then commits; yields
    the writer's backend pid. Readers must wait for it: its positions are not visible."""
    holds = threading.Event()
    release = threading.Event()
    pids: list[int] = []
    failed: list[BaseException] = []

    def body(uow: UnitOfWork) -> None:
        tx = uow.tree
        pids.append(int(tx.conn.execute(text("SELECT pg_backend_pid()")).scalar_one()))
        tx.mkdir(path)
        tx.events.flush()  # what the unit of work does as its last statement
        holds.set()
        if not release.wait(60):
            raise AssertionError("the writer was never released")

    def run() -> None:
        try:
            coord.run(ns, body)
        except BaseException as exc:
            failed.append(exc)
            holds.set()

    thread = threading.Thread(target=run, name="writer-holding-block", daemon=True)
    thread.start()
    assert holds.wait(30) and not failed, failed
    try:
        yield pids[-1]
    finally:
        release.set()
        thread.join(30)
    assert not thread.is_alive() and not failed, failed


def check_claim_after_call(coord: Coordinator, sql: str, params: Sequence[tuple[str, str, str]],
                           function: str, only_if: str) -> None:
    """That a one-statement write (``sql``, from ``coordinator.single_statement``) runs
    ``function`` before its claim (transaction id, position lock, then ``nextval``), per
    row of its result for which ``only_if`` holds: on the plan PostgreSQL makes for the
    values (``params``: name, type, literal) and on the one generic plan it keeps."""
    for n, (name, _, _) in enumerate(params, 1):
        sql = sql.replace(f"%({name})s", f"${n}").replace(f"%({name})b", f"${n}")
    types = ", ".join(t for _, t, _ in params)
    values = ", ".join(v for _, _, v in params)
    for mode in ("force_custom_plan", "force_generic_plan"):
        with coord.engine.connect() as conn:
            cur = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            cur.execute(f"SET plan_cache_mode = {mode}")
            cur.execute(f"PREPARE lone_write({types}) AS {sql}")
            cur.execute(f"EXPLAIN VERBOSE EXECUTE lone_write({values})")
            plan = [r[0] for r in cur.fetchall()]
            cur.execute("DEALLOCATE lone_write")
            conn.rollback()
        text_plan = "\n".join(plan)
        assert "NULL::xid8" not in text_plan, text_plan

        def line_of(needle: str, after: int = 0, plan: list[str] = plan) -> int:
            return next(i for i, line in enumerate(plan) if i >= after and needle in line)

        block = line_of("CTE block")
        # Outer nodes are printed first, each with its output: the loop that yields
        # nextval, its outer side (r's row: the function ran), then its inner side, run
        # per row of r that passes the filter: the claim, innermost (evaluated first) last.
        assert (block < line_of("nextval(", block) < line_of("CTE Scan on r", block)
                < line_of(f"One-Time Filter: {only_if}", block)
                < line_of(POSITION_LOCK_SQL, block)
                < line_of("pg_current_xact_id()", block)), (mode, text_plan)
        assert line_of(f"Function Scan on public.{function}") < block, (mode, text_plan)


def plans_of(coord: Coordinator, function: str) -> tuple[int, int]:
    """(generic, custom) plans of the prepared statement that calls ``function``, on the
    connection ``coord`` gets (a pool of one: the one that ran it)."""
    with coord.engine.connect() as conn:
        row = conn.execute(text(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE :like"
        ), {"like": f"%{function}(%"}).one()
    return int(row.generic_plans), int(row.custom_plans)


def buffers_of(conn: psycopg.Connection[tuple[object, ...]], sql: str,
               params: tuple[object, ...]) -> int:
    """Shared buffers one run of ``sql`` touched (the functions it calls included)."""
    row = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}".encode(),
                       params).fetchone()
    assert row is not None and isinstance(row[0], list)
    plan = row[0][0]["Plan"]
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


class PlanLog:
    """The plans of the statements run on the connections it is attached to, the
    statements of the functions they call included, as ``auto_explain`` (PostgreSQL's
    contrib module, loaded for the session) logs them to the client; and the rows their
    executors handled. A statement's plan is logged when its portal closes: in a
    transaction, as the next statement starts."""

    #: Why a test that counts rows fails where the module is missing, said in one line.
    MISSING = ("this PostgreSQL server has no auto_explain, which these tests read plans "
               "through (the pgserver wheel ships none): install the distribution's "
               "PostgreSQL server (`./dev test` installs Debian's) or set PG_BIN to one")
    SETTINGS = ("SET auto_explain.log_min_duration = 0",
                "SET auto_explain.log_analyze = on", "SET auto_explain.log_timing = off",
                "SET auto_explain.log_nested_statements = on",
                "SET auto_explain.log_format = json", "SET client_min_messages = log")

    def __init__(self) -> None:
        self.plans: list[dict[str, Any]] = []

    def keep(self, diag: psycopg.errors.Diagnostic) -> None:
        message = diag.message_primary or ""
        if message.startswith("duration:") and "{" in message:
            self.plans.append(json.loads(message[message.index("{"):])["Plan"])

    def attach(self, driver: psycopg.Connection[Any]) -> None:
        """Log the plans of what ``driver`` runs from now on, in its current transaction
        (if it rolls back, the settings go with it)."""
        try:
            driver.execute(b"LOAD 'auto_explain'")
        except psycopg.errors.UndefinedFile as exc:
            raise AssertionError(self.MISSING) from exc
        for setting in self.SETTINGS:
            driver.execute(setting.encode())
        driver.add_notice_handler(self.keep)

    def rows_handled(self) -> int:
        """Each plan node's rows and the rows its filters removed, times its loops,
        summed over every plan logged. Counted, not timed: a plan that compares every
        node with every parent shows as the product of the two on any machine."""

        def handled(node: dict[str, Any]) -> int:
            own = sum(int(node.get(k, 0)) for k in (
                "Actual Rows", "Rows Removed by Filter", "Rows Removed by Join Filter"))
            return own * int(node.get("Actual Loops", 1)) + sum(
                handled(child) for child in node.get("Plans", ()))

        assert self.plans, "auto_explain logged no plan"
        return sum(handled(plan) for plan in self.plans)


def rows_handled(conn: Connection, statement: str, params: dict[str, object]) -> int:
    """``PlanLog.rows_handled`` of one run of ``statement`` on ``conn``."""
    log = PlanLog()
    driver = conn.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    log.attach(driver)
    try:
        conn.execute(text(statement), params).all()
    finally:
        conn.exec_driver_sql("RESET client_min_messages")  # closes the statement's portal
        conn.exec_driver_sql("SET auto_explain.log_min_duration = -1")
        driver.remove_notice_handler(log.keep)
    return log.rows_handled()


@contextmanager
def plans_logged(engine: Engine) -> Iterator[PlanLog]:
    """A ``PlanLog`` of every connection ``engine`` opens until the block ends (its pool
    emptied first, and again after)."""
    log = PlanLog()

    def on_connect(driver: psycopg.Connection[Any], _record: object) -> None:
        log.attach(driver)
        driver.commit()

    engine.dispose()
    event.listen(engine, "connect", on_connect)
    try:
        yield log
    finally:
        event.remove(engine, "connect", on_connect)
        engine.dispose()


#: Nodes of the namespace ``freeze_statistics(coord, beside=True)`` analyzes beside the
#: test's.
BESIDE_NODES = 1_000


def freeze_statistics(coord: Coordinator, beside: bool = False) -> None:
    """``ANALYZE nodes`` now, with autovacuum off for the table: what follows is planned
    with these statistics, as it is in the minute after a burst of creates before
    autovacuum's next analyze. ``beside``: first a namespace ``beside`` of
    ``BESIDE_NODES`` nodes, so that the statistics see the test's namespace small beside a
    large one: the planner then guesses one row for it, whatever the estimate of
    ``nodes.namespace`` (migration 0018 mends a sample where each namespace is a root
    alone, not this one)."""
    if beside:
        coord.create_namespace("beside")
        bulk_subtree(coord, "beside", "/", "b", dirs=10, files_per_dir=BESIDE_NODES // 10 - 1)
    with coord.engine.connect() as conn:
        conn.execute(text("ALTER TABLE nodes SET (autovacuum_enabled = false)"))
        conn.execute(text("ANALYZE nodes"))
        conn.commit()


def nodes_reltuples(coord: Coordinator) -> float:
    """The row count the statistics of ``nodes`` hold (-1 before any analyze)."""
    with coord.engine.connect() as conn:
        return float(conn.execute(text(
            "SELECT reltuples FROM pg_class WHERE relname = 'nodes'")).scalar_one())


def largest_value_held(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> int:
    """The size of the largest value in the answer ``cur`` still holds."""
    result = cur.pgresult
    assert result is not None
    return max(len(result.get_value(row, col) or b"")
               for row in range(result.ntuples) for col in range(result.nfields))


def value_held(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any], column: str) -> bytes | None:
    """The value of ``column`` in the first row of the answer ``cur`` still holds."""
    result = cur.pgresult
    assert result is not None and result.ntuples > 0
    names = [result.fname(col) for col in range(result.nfields)]
    return result.get_value(0, names.index(column.encode()))
