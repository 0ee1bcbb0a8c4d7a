"""Idempotency-Key: retries and concurrent duplicates apply once (real server, real threads)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from http_support import Keys, LiveServer, err, ok
from sqlalchemy import text

from coordinator import Coordinator, NotFound
from coordinator.unit_of_work import UnitOfWork
from pathkeeper.http.app import create_app
from pathkeeper.http.auth import Authenticator
from pathkeeper.http.idempotency import request_hash, run_idempotent
from pathkeeper.http.settings import ServiceSettings

A = "/v1/namespaces/a"


def events_of(coord: Coordinator, ns: str = "a") -> list[tuple[str, str]]:
    events, _ = coord.read_events(namespaces=[ns])
    return [(e.type, e.payload.get("path", "")) for e in events]


def test_retry_returns_the_original_answer(client: TestClient, keys: Keys,
                                           coord: Coordinator) -> None:
    h = {**Keys.h(keys.a_write), "Idempotency-Key": "k-1"}
    first = client.post(f"{A}/files", json={"path": "/f", "content": "x"}, headers=h)
    again = client.post(f"{A}/files", json={"path": "/f", "content": "x"}, headers=h)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    # A content write, retried: version goes up once.
    wh = {**Keys.h(keys.a_write), "Idempotency-Key": "k-2"}
    w1 = ok(client.put(f"{A}/node/content", params={"path": "/f"}, json={"content": "y"},
                       headers=wh))
    w2 = ok(client.put(f"{A}/node/content", params={"path": "/f"}, json={"content": "y"},
                       headers=wh))
    assert w1 == w2 and w1["version"] == 2
    assert coord.stat("a", "/f").version == 2
    # Same key, different request: refused, nothing applied.
    err(client.put(f"{A}/node/content", params={"path": "/f"}, json={"content": "z"},
                   headers=wh), 422, "idempotency_key_reused")
    err(client.post(f"{A}/dirs", json={"path": "/d"}, headers=wh), 422,
        "idempotency_key_reused")
    assert coord.stat("a", "/f").content == "y"
    assert events_of(coord) == [("namespace_created", ""), ("created", "/f"),
                                ("written", "/f")]
    # Keys are per API key: another key's "k-1" is a different request.
    other = {**Keys.h(keys.admin), "Idempotency-Key": "k-1"}
    err(client.post(f"{A}/files", json={"path": "/f", "content": "x"}, headers=other), 409,
        "already_exists")
    # A failed request records nothing: the retry runs again (and may now succeed).
    fh = {**Keys.h(keys.a_write), "Idempotency-Key": "k-3"}
    err(client.post(f"{A}/files", json={"path": "/nodir/g"}, headers=fh), 404, "not_found")
    coord.mkdir("a", "/nodir")
    ok(client.post(f"{A}/files", json={"path": "/nodir/g"}, headers=fh), 201)
    err(client.post(f"{A}/files", json={"path": "/f"},
                    headers={**fh, "Idempotency-Key": "x" * 201}), 422, "invalid_request")


def test_keys_expire(make_client: Callable[..., TestClient], keys: Keys,
                     coord: Coordinator) -> None:
    client = make_client(idempotency_ttl_seconds=0.0)  # every row is expired at once
    h = {**Keys.h(keys.a_write), "Idempotency-Key": "k"}
    ok(client.post(f"{A}/files", json={"path": "/f"}, headers=h), 201)
    # The expired row is not replayed: the request runs again.
    err(client.post(f"{A}/files", json={"path": "/f"}, headers=h), 409, "already_exists")
    ok(client.post(f"{A}/dirs", json={"path": "/d"}, headers=h), 201)  # and the key is reusable
    from coordinator.idempotency import purge

    assert purge(coord.engine) == 1
    with coord.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM idempotency_keys").scalar() == 0


def _race(url: str, n: int, send: Callable[[httpx.Client], httpx.Response]
          ) -> list[httpx.Response]:
    """``n`` threads, each with its own connection, send at the same moment."""
    barrier = threading.Barrier(n)
    out: list[httpx.Response | None] = [None] * n
    failures: list[BaseException] = []

    def run(i: int) -> None:
        try:
            with httpx.Client(base_url=url, timeout=30) as http:
                barrier.wait()
                out[i] = send(http)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    return [r for r in out if r is not None]


def test_concurrent_duplicates_apply_once(settings: ServiceSettings, keys: Keys,
                                          coord: Coordinator) -> None:
    # Duplicates wait on the first request's uncommitted key row; on this shared machine
    # give that wait more room than the default lock_timeout before it would answer 409.
    with LiveServer(create_app(settings.with_coordinator(lock_timeout=15.0))) as server:
        _duplicates(server, keys, coord)


def _duplicates(live_server: LiveServer, keys: Keys, coord: Coordinator) -> None:
    coord.mkdir("a", "/src")
    coord.create_file("a", "/src/f", "0")
    for round_ in range(3):
        key = f"dup-{round_}"
        h = {**Keys.h(keys.a_write), "Idempotency-Key": key}
        body: dict[str, Any] = {"path": f"/src/new-{round_}", "content": str(round_)}

        def create(http: httpx.Client, h: dict[str, str] = h,
                   body: dict[str, Any] = body) -> httpx.Response:
            return http.post(f"{A}/files", json=body, headers=h)

        created = _race(live_server.url, 8, create)
        assert len(created) == 8
        assert {r.status_code for r in created} == {201}, [r.text for r in created]
        # Everyone got the one original answer (JSONB may reorder keys: compare values).
        assert all(r.json() == created[0].json() for r in created)
        # Content writes are not naturally idempotent: they must still apply once.
        wh = {**Keys.h(keys.a_write), "Idempotency-Key": f"w-{round_}"}

        def write(http: httpx.Client, wh: dict[str, str] = wh, r: int = round_
                  ) -> httpx.Response:
            return http.put(f"{A}/node/content", params={"path": "/src/f"},
                            json={"content": f"v{r}"}, headers=wh)

        written = _race(live_server.url, 8, write)
        assert {r.status_code for r in written} == {200}, [r.text for r in written]
        assert all(r.json() == written[0].json() for r in written)
        # And again after completion.
        late = httpx.put(f"{live_server.url}{A}/node/content", params={"path": "/src/f"},
                         json={"content": f"v{round_}"}, headers=wh)
        assert late.json() == written[0].json()
    assert coord.stat("a", "/src/f").version == 4  # 1 + one write per round
    types = [t for t, _ in events_of(coord)]
    assert types.count("written") == 3 and types.count("created") == 2 + 3


def _wait_for_lock_waiter(coord: Coordinator) -> None:
    """Until some session of this database waits on a lock (polling pg_stat_activity)."""
    deadline = time.monotonic() + 20
    with coord.engine.connect() as conn:
        while conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )).scalar_one() == 0:
            assert time.monotonic() < deadline, "the duplicate never waited"
            conn.commit()
            time.sleep(0.01)  # polling the server's own view of lock waits


@pytest.mark.parametrize("first_commits", [True, False])
def test_duplicate_waits_for_the_first_in_flight(settings: ServiceSettings, keys: Keys,
                                                 coord: Coordinator,
                                                 first_commits: bool) -> None:
    """A first request holds its key row uncommitted; the duplicate blocks on it, then
    replays the committed answer (or, if the first rolls back, runs itself)."""
    principal = Authenticator(coord.engine, 0).authenticate(f"Bearer {keys.a_write}")
    body = {"path": "/once", "content": "", "metadata": None}
    digest = request_hash("POST", f"{A}/files", {}, None, body)
    release = threading.Event()

    def first_work(uow: UnitOfWork) -> None:
        uow.tree.mkdir("/first")
        release.wait(30)
        if not first_commits:
            raise NotFound("first request failed")

    def first() -> None:
        try:
            run_idempotent(coord, "a", "k", principal.key_id, digest, 3600, first_work,
                           lambda _: (201, {"from": "first"}))
        except NotFound:
            pass

    with LiveServer(create_app(settings.with_coordinator(lock_timeout=30.0))) as server:
        holder = threading.Thread(target=first)
        holder.start()
        answer: dict[str, httpx.Response] = {}
        dup = threading.Thread(target=lambda: answer.setdefault("r", httpx.post(
            f"{server.url}{A}/files", json={"path": "/once"}, timeout=60,
            headers={**Keys.h(keys.a_write), "Idempotency-Key": "k"})))
        dup.start()
        _wait_for_lock_waiter(coord)
        assert "r" not in answer  # still waiting for the first
        release.set()
        holder.join()
        dup.join()
    r = answer["r"]
    assert r.status_code == 201, r.text
    if first_commits:
        assert r.json() == {"from": "first"} and r.headers["Idempotent-Replayed"] == "true"
        assert [n.path for n in coord.walk("a")] == ["/", "/first"]
    else:
        assert r.json()["node"]["path"] == "/once"
        assert [n.path for n in coord.walk("a")] == ["/", "/once"]
