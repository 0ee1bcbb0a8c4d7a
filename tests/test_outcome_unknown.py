"""A change whose connection dies after it was sent to commit is reported as such:
``OutcomeUnknown`` (retryable; HTTP 503 with Retry-After), never as success or as a
plain failure; with an idempotency key, the retry applies it exactly once.

The server is made to hold every COMMIT (a deferred trigger on ``events`` sleeps at
commit time) while another session terminates the committing backend: the client has
sent everything and its connection dies before the answer, as when a primary dies."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from coordinator import Coordinator
from coordinator.async_statements import AsyncStatements
from coordinator.commands import Mkdir
from coordinator.db import libpq_url
from coordinator.errors import OutcomeUnknown
from coordinator.idempotency import run_once
from coordinator.settings import Settings
from pathkeeper.http.errors import coordinator_response

SLOW_COMMIT = """
CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN PERFORM pg_sleep(30); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON events
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();
"""


@pytest.fixture
def slow_commits(database_url: str) -> Iterator[Callable[[], None]]:
    """Commits of events hang; the callable removes the trigger again."""
    url = libpq_url(database_url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SLOW_COMMIT.encode())

    def remove() -> None:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("DROP TRIGGER IF EXISTS slow_commit ON events")

    yield remove


def _terminate_committer(database_url: str) -> threading.Thread:
    """In a thread: wait for a backend sleeping in the commit trigger and end it."""

    def run() -> None:
        with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE wait_event = 'PgSleep' AND datname = current_database()"
                ).fetchone()
                if row is not None:
                    return
                time.sleep(0.05)

    t = threading.Thread(target=run)
    t.start()
    return t


def _lost(database_url: str, call: Callable[[], Any]) -> BaseException:
    killer = _terminate_committer(database_url)
    try:
        call()
    except BaseException as exc:
        return exc
    finally:
        killer.join()
    raise AssertionError("the call succeeded although its connection died at COMMIT")


def _count(coord: Coordinator, ns: str, path: str) -> int:
    return len([n for n in coord.listdir(ns, "/") if n.path == path])


def test_lone_group_and_async_writes_report_an_unknown_outcome(
    database_url: str, coord: Coordinator, ns: str, slow_commits: Callable[[], None]
) -> None:
    lone = _lost(database_url, lambda: coord.execute(ns, Mkdir("/lone")))
    assert isinstance(lone, OutcomeUnknown), repr(lone)

    group = _lost(database_url, lambda: coord.apply(ns, [Mkdir("/g1"), Mkdir("/g2")]))
    assert isinstance(group, OutcomeUnknown), repr(group)

    async def via_async() -> None:
        statements = AsyncStatements(database_url, Settings(), wake=lambda _ns: None)
        await statements.open()
        try:
            statement = statements.statement(ns, Mkdir("/async"))
            assert statement is not None
            await statements.execute(statement)
        finally:
            await statements.close()

    lost = _lost(database_url, lambda: asyncio.run(via_async()))
    assert isinstance(lost, OutcomeUnknown), repr(lost)

    answer = coordinator_response(lone, retry_after=1)
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == "1"
    assert b'"outcome_unknown"' in answer.body


def test_an_idempotent_retry_after_an_unknown_outcome_applies_once(
    database_url: str, coord: Coordinator, ns: str, slow_commits: Callable[[], None]
) -> None:
    def request() -> Any:
        return run_once(coord, ns, "key-1", "digest-1", 60.0,
                        lambda uow: uow.tree.mkdir("/idem"),
                        lambda r: (201, {"id": str(r.node.id), "seq": r.seq}))

    first = _lost(database_url, request)
    assert isinstance(first, OutcomeUnknown), repr(first)
    slow_commits()
    retried = request()
    again = request()
    assert not retried.replayed and again.replayed
    assert again.body == retried.body
    assert _count(coord, ns, "/idem") == 1
