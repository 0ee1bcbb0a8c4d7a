"""A slow or hung database answers 503 with Retry-After within a bounded time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

from fastapi.testclient import TestClient
from http_support import Keys, err
from sqlalchemy import create_engine, text
from tree_checks import wait_for_lock_waiter

from coordinator import Coordinator
from coordinator.db import sqlalchemy_url
from pathkeeper.http.settings import ServiceSettings


def test_statement_timeout_gives_503(make_client: Callable[..., TestClient], keys: Keys,
                                     coord: Coordinator, database_url: str,
                                     settings: ServiceSettings) -> None:
    f = coord.create_file("a", "/f", "x")
    # Lock waits are normally cut by lock_timeout (409 conflict); make them longer than the
    # statement timeout, so the statement timeout is what ends this one.
    client = make_client(statement_timeout_seconds=0.5,
                         coordinator=replace(settings.coordinator, lock_timeout=30.0))
    blocker = create_engine(sqlalchemy_url(database_url))
    try:
        with blocker.connect() as conn, conn.begin():
            conn.execute(text("SELECT 1 FROM nodes WHERE id = :id FOR UPDATE"),
                         {"id": f.node.id})
            started = time.monotonic()
            r = client.put("/v1/namespaces/a/node/content", params={"path": "/f"},
                           json={"content": "y"}, headers=Keys.h(keys.a_write))
            elapsed = time.monotonic() - started
        err(r, 503, "unavailable")
        assert r.headers["Retry-After"] == "1"
        assert elapsed < 10
    finally:
        blocker.dispose()
    assert coord.stat("a", "/f").content == "x"


def test_pool_exhaustion_gives_503(make_client: Callable[..., TestClient],
                                   keys: Keys, settings: ServiceSettings) -> None:
    client = make_client(coordinator=replace(settings.coordinator, pool_size=1, max_overflow=0,
                                             pool_timeout=0.3))
    engine = client.app.state.coordinator.engine  # type: ignore[attr-defined]
    with engine.connect():  # the only pooled connection is taken
        started = time.monotonic()
        r = client.get("/v1/namespaces/a/node", params={"path": "/"},
                       headers=Keys.h(keys.a_read))
        elapsed = time.monotonic() - started
    # Auth needs a connection too: either step may be the one that times out.
    err(r, 503, "unavailable")
    assert r.headers["Retry-After"] == "1" and elapsed < 5
    ready = client.get("/readyz")
    assert ready.status_code == 200


def test_the_service_keeps_the_connections_a_burst_opened(
    make_client: Callable[..., TestClient],
) -> None:
    """16 requests at a time, twice: the second burst runs on the sessions the first one
    started (a pool that closes what it opened beyond its size would start 6 again)."""
    client = make_client()
    engine = client.app.state.coordinator.engine  # type: ignore[attr-defined]

    def burst() -> set[tuple[int, object]]:
        together = threading.Barrier(16)
        seen: set[tuple[int, object]] = set()

        def hold() -> None:
            with engine.connect() as conn:
                pid, started = conn.execute(text(
                    "SELECT pid, backend_start FROM pg_stat_activity "
                    "WHERE pid = pg_backend_pid()"
                )).one()
                seen.add((pid, started))
                together.wait(10)  # all 16 checked out at once

        threads = [threading.Thread(target=hold) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        return seen

    first = burst()
    assert len(first) == 16
    assert burst() == first


def test_the_lanes_pool_exhausted_gives_503(make_client: Callable[..., TestClient],
                                           keys: Keys, coord: Coordinator, database_url: str,
                                           settings: ServiceSettings) -> None:
    """A command the lane sends holds the lane's only connection (waiting on a row lock):
    a read behind it gets 503 once the pool's timeout passes, and the command completes."""
    f = coord.create_file("a", "/f", "x")
    client = make_client(coordinator=replace(settings.coordinator, pool_size=1, max_overflow=0,
                                             pool_timeout=0.3, lock_timeout=20.0))
    blocker = create_engine(sqlalchemy_url(database_url))
    answers: dict[str, object] = {}
    try:
        with blocker.connect() as conn, conn.begin():
            conn.execute(text("SELECT 1 FROM nodes WHERE id = :id FOR UPDATE"),
                         {"id": f.node.id})
            writer = threading.Thread(target=lambda: answers.update(write=client.put(
                "/v1/namespaces/a/node/content", params={"path": "/f"},
                json={"content": "y"}, headers=Keys.h(keys.a_write))))
            writer.start()
            wait_for_lock_waiter(coord)  # the write is in the database, on the connection
            started = time.monotonic()
            r = client.get("/v1/namespaces/a/node", params={"path": "/f"},
                           headers=Keys.h(keys.a_read))
            elapsed = time.monotonic() - started
        writer.join(30)
    finally:
        blocker.dispose()
    err(r, 503, "unavailable")
    assert r.headers["Retry-After"] == "1" and elapsed < 5
    assert answers["write"].status_code == 200  # type: ignore[attr-defined]
    assert coord.stat("a", "/f").content == "y"
