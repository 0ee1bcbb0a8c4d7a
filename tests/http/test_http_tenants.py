"""One API key cannot lock the other keys out.

Requests in flight are limited per key as well as in all, and long polls (the change
feed's ``wait``, ``/v1/indexed``, search with ``min_seq``) have a pool of their own,
so idle long polls never hold the slots short requests need. Real concurrent clients
(threads) against a real uvicorn server and database.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import httpx
import pytest
from http_support import Keys, LiveServer

from coordinator import Coordinator
from pathkeeper.http.app import create_app
from pathkeeper.http.settings import ServiceSettings

DEFAULTS = ServiceSettings(database_url="")


@pytest.fixture
def server(settings: ServiceSettings) -> Iterator[LiveServer]:
    # The service's defaults, but lock waits long enough for the flood test to hold them.
    with LiveServer(create_app(settings.with_coordinator(lock_timeout=8.0))) as live:
        yield live


def _cursor(url: str, ns: str, key: str) -> str:
    """The change feed's current end: a long poll after it waits for new events."""
    with httpx.Client(base_url=url, timeout=20) as c:
        r = c.get(f"/v1/namespaces/{ns}/events", params={"limit": 1000}, headers=Keys.h(key))
        assert r.status_code == 200, r.text
        cursor: str = r.json()["cursor"]
        return cursor


def _wait_until(condition: Callable[[], bool], seconds: float) -> None:
    end = time.monotonic() + seconds
    while not condition() and time.monotonic() < end:
        time.sleep(0.02)


def _other_tenant_works(url: str, key: str, n: int = 20) -> list[int]:
    """Statuses of ``n`` ordinary requests of another key, a few at a time."""
    h = Keys.h(key)

    def one(i: int) -> int:
        with httpx.Client(base_url=url, timeout=20) as c:
            if i % 2:
                return c.get("/v1/namespaces/b/node", params={"path": "/"},
                             headers=h).status_code
            return c.post("/v1/namespaces/b/dirs", json={"path": f"/d{i}"},
                          headers=h).status_code

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, range(n)))


def test_idle_long_polls_of_one_key_do_not_lock_out_the_others(
    server: LiveServer, keys: Keys
) -> None:
    """64 idle long polls of the change feed from one read-only key (the report)."""
    polls = 64
    statuses: list[int] = []
    lock = threading.Lock()
    after = _cursor(server.url, "a", keys.a_read)

    def long_poll() -> None:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            r = c.get("/v1/namespaces/a/events", params={"wait": 6, "after": after},
                      headers=Keys.h(keys.a_read))
        with lock:
            statuses.append(r.status_code)

    threads = [threading.Thread(target=long_poll) for _ in range(polls)]
    for t in threads:
        t.start()
    # Those over the key's long-poll limit are answered at once; give them time to be.
    expected_refused = polls - DEFAULTS.max_long_polls_per_key
    _wait_until(lambda: len(statuses) >= expected_refused, 3.0)
    started = time.monotonic()
    others = _other_tenant_works(server.url, keys.b_write)
    # The same key's short requests are not held up by its own long polls either.
    with httpx.Client(base_url=server.url, timeout=20) as c:
        own = c.get("/v1/namespaces/a/node", params={"path": "/"},
                    headers=Keys.h(keys.a_read)).status_code
    elapsed = time.monotonic() - started
    for t in threads:
        t.join(60)
    assert all(s in (200, 201) for s in others), others
    assert own == 200
    assert elapsed < 5, elapsed  # not after the long polls ended
    assert sorted(set(statuses)) == [200, 429], statuses
    assert statuses.count(200) == DEFAULTS.max_long_polls_per_key
    assert statuses.count(429) == expected_refused


def test_a_flood_of_slow_requests_from_one_key_leaves_room_for_the_others(
    server: LiveServer, keys: Keys, coord: Coordinator
) -> None:
    """70 writes of one key all waiting on a row lock (more than the global limit):
    the key gets its share, the rest 429 at once, and another key is served."""
    f = coord.create_file("a", "/f", "x")
    flood = 70
    statuses: list[int] = []
    lock = threading.Lock()

    def write(i: int) -> None:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            r = c.put(f"/v1/namespaces/a/nodes/{f.node.id}/content",
                      json={"content": f"v{i}"}, headers=Keys.h(keys.a_write))
        with lock:
            statuses.append(r.status_code)

    with coord.transaction("a") as group:
        group.write_file("/f", "held")  # every write of the flood waits for this row
        threads = [threading.Thread(target=write, args=(i,)) for i in range(flood)]
        for t in threads:
            t.start()
        expected_refused = flood - DEFAULTS.max_inflight_per_key
        _wait_until(lambda: len(statuses) >= expected_refused, 3.0)
        started = time.monotonic()
        others = _other_tenant_works(server.url, keys.b_write)
        elapsed = time.monotonic() - started
    for t in threads:
        t.join(60)
    assert all(s in (200, 201) for s in others), others
    assert elapsed < 6, elapsed  # served while the flood still waited
    assert statuses.count(429) == expected_refused, statuses
    assert set(statuses) <= {200, 409, 429, 503}, statuses


def test_limits_are_per_key_not_per_connection(server: LiveServer, keys: Keys) -> None:
    """Two keys each get their own long-poll share."""
    statuses: dict[str, list[int]] = {"a": [], "b": []}
    lock = threading.Lock()
    after = {"a": _cursor(server.url, "a", keys.a_read),
             "b": _cursor(server.url, "b", keys.b_write)}

    def long_poll(ns: str, key: str) -> None:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            r = c.get(f"/v1/namespaces/{ns}/events", params={"wait": 2, "after": after[ns]},
                      headers=Keys.h(key))
        with lock:
            statuses[ns].append(r.status_code)

    per_key = DEFAULTS.max_long_polls_per_key
    threads = [threading.Thread(target=long_poll, args=(ns, key))
               for ns, key in (("a", keys.a_read), ("b", keys.b_write))
               for _ in range(per_key)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert statuses == {"a": [200] * per_key, "b": [200] * per_key}


def _stall(url: str, request: str) -> socket.socket:
    """A raw connection that sent ``request`` (headers and the start of a body) and
    then sends nothing more."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(request.encode())
    return sock


def _answer(sock: socket.socket, seconds: float) -> bytes:
    """The whole answer the server sent on ``sock`` within ``seconds``: its head and as
    much body as its Content-Length says, however the bytes were cut into segments
    (b"" if it closed the connection without an answer; b"pending" if it did neither)."""
    sock.settimeout(seconds)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            more = sock.recv(4096)
            if not more:
                return data
            data += more
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            more = sock.recv(4096)
            if not more:
                break
            data, body = data + more, body + more
    except TimeoutError:
        return data or b"pending"
    except ConnectionResetError:
        return data
    return data


def _command(key: str | None, path: str = "/v1/namespaces/a/dirs",
             content_type: str = "application/json") -> str:
    """A command's headers, declaring a 100-byte body, and its first byte."""
    auth = f"Authorization: Bearer {key}\r\n" if key is not None else ""
    return (f"POST {path} HTTP/1.1\r\nHost: test\r\n{auth}"
            f"Content-Type: {content_type}\r\nContent-Length: 100\r\n\r\n{{")


def test_stalled_bodies_of_made_up_keys_lock_no_key_out_and_time_out(
    settings: ServiceSettings, keys: Keys, coord: Coordinator
) -> None:
    """64 connections with made-up keys, 64 without a key and 8 for the API docs (from
    one address), each sending a command's headers and one byte of body, then nothing:
    a valid key is served all along. A valid key's own stalled bodies (its whole share,
    and an import that stops mid-stream) are cut off after the body timeout, which gives
    its slots back, and the import left nothing behind. Raw sockets against uvicorn."""
    timeout = 5.0
    app = create_app(replace(settings, body_timeout_seconds=timeout))
    with LiveServer(app) as server, contextlib.ExitStack() as opened:

        def stall(request: str) -> socket.socket:
            return opened.enter_context(_stall(server.url, request))

        docs = [stall(_command(None, "/openapi.json")) for _ in range(8)]
        docs_stalled = time.monotonic()
        strangers = [stall(_command(f"pk_made_up_{i}")) for i in range(64)]
        strangers += [stall(_command(None)) for _ in range(64)]
        time.sleep(0.5)  # all of them are in the server
        others = _other_tenant_works(server.url, keys.b_write)
        with httpx.Client(base_url=server.url, timeout=20) as c:
            assert c.get("/readyz").status_code == 200
        # Served while the docs' requests still held their slots (before the timeout).
        assert time.monotonic() - docs_stalled < timeout, time.monotonic() - docs_stalled
        assert all(s in (200, 201) for s in others), others
        # Refused at once, before the body: 401, holding nothing.
        assert {_answer(s, 5).split(b"\r\n")[0] for s in strangers} == {
            b"HTTP/1.1 401 Unauthorized"}
        # The docs' stalled requests: over the address's share refused at once, the
        # rest cut off by the body timeout.
        doc_answers = sorted(_answer(s, timeout + 3).split(b"\r\n")[0] for s in docs)
        assert doc_answers == sorted(
            [b"HTTP/1.1 408 Request Timeout"] * settings.max_anonymous_per_address
            + [b"HTTP/1.1 429 Too Many Requests"] * (8 - settings.max_anonymous_per_address)
        ), doc_answers

        # A valid key stalls its whole share, and one import stops mid-stream.
        own = [stall(_command(keys.a_write))
               for _ in range(DEFAULTS.max_inflight_per_key - 1)]
        own.append(stall(_command(
            keys.a_write, "/v1/namespaces/a/import", "application/x-ndjson"
        ).replace("{", '{"path": "/imported", "kind": "dir"}\n')))
        stalled_at = time.monotonic()
        time.sleep(0.5)
        h = Keys.h(keys.a_write)
        with httpx.Client(base_url=server.url, timeout=20) as c:
            assert c.post("/v1/namespaces/a/dirs", json={"path": "/x"},
                          headers=h).status_code == 429  # its own share is full
            answers = [_answer(s, timeout + 5) for s in own]
            cut_off = time.monotonic() - stalled_at
            assert c.post("/v1/namespaces/a/dirs", json={"path": "/x"},
                          headers=h).status_code == 201  # the slots are free again
        assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), answers
        assert timeout - 0.5 <= cut_off < timeout + 3, cut_off  # not before, not never
        assert {_answer(s, 5) for s in own} == {b""}  # and the connections closed
        assert [n.name for n in coord.listdir("a", "/")] == ["x"]  # nothing imported
