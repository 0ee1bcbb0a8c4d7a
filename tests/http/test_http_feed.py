"""GET /v1/namespaces/{ns}/events: a follower that reconnects after every page gets every
event of its namespace exactly once, in commit order, while writers run concurrently."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING

import httpx
import pytest
from http_support import Keys, LiveServer, err, ok
from sqlalchemy import text

from coordinator import Coordinator, CursorExpired
from coordinator.api_keys import create_key
from coordinator.errors import CursorAhead
from coordinator.results import POSITION_BLOCK
from indexer.retention import compact, take_snapshot
from pathkeeper.client import Client

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

URL = "/v1/namespaces/a/events"


def test_follower_gets_every_event_once_in_order(live_server: LiveServer, keys: Keys,
                                                 coord: Coordinator) -> None:
    writers, per_writer = 4, 15
    errors: list[BaseException] = []

    def write(w: int) -> None:
        try:
            coord.mkdir("a", f"/w{w}")
            for i in range(per_writer - 1):
                coord.create_file("a", f"/w{w}/f{i}", "x")
                coord.mkdir("b", f"/noise-{w}-{i}")  # another namespace, interleaved
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    expected_count = 1 + writers * per_writer  # namespace_created + the writes
    got: list[int] = []
    cursor: str | None = None
    deadline = time.monotonic() + 60
    pages = 0
    while len(got) < expected_count and time.monotonic() < deadline:
        # A new connection per page: the cursor is all the state there is.
        with httpx.Client(base_url=live_server.url, headers=Keys.h(keys.a_read)) as http:
            params: dict[str, str | int | float] = {"limit": 3, "wait": 5}
            if cursor is not None:
                params["after"] = cursor
            page = ok(http.get(URL, params=params, timeout=30))
        pages += 1
        assert all(e["namespace"] == "a" for e in page["events"])
        got += [e["position"] for e in page["events"]]
        cursor = page["cursor"]
    for t in threads:
        t.join()
    assert not errors, errors
    everything, _ = coord.read_events(namespaces=["a"], limit=10_000)
    assert got == [e.position for e in everything]  # exactly once, in order
    assert len(got) == expected_count and pages > expected_count // 3


def test_long_poll_wakes_on_commit(live_server: LiveServer, keys: Keys,
                                   coord: Coordinator) -> None:
    with httpx.Client(base_url=live_server.url, headers=Keys.h(keys.a_read)) as http:
        head = ok(http.get(URL, params={"limit": 1000}))
        assert [e["type"] for e in head["events"]] == ["namespace_created"]
        empty = ok(http.get(URL, params={"after": head["cursor"], "wait": 0.2}))
        assert empty["events"] == []
        result: dict[str, object] = {}

        def poll() -> None:
            started = time.monotonic()
            result["page"] = ok(http.get(URL, params={"after": head["cursor"], "wait": 20},
                                         timeout=60))
            result["elapsed"] = time.monotonic() - started

        poller = threading.Thread(target=poll)
        poller.start()
        created = coord.mkdir("a", "/late")
        poller.join()
        page = result["page"]
        assert isinstance(page, dict)
        assert [e["position"] for e in page["events"]] == [created.seq]
        assert isinstance(result["elapsed"], float) and result["elapsed"] < 15
        err(http.get(URL, params={"after": "xyz"}), 400, "invalid_cursor")
        err(http.get(URL, params={"wait": 1000}), 422, "invalid_request")


def test_a_cursor_past_the_end_of_the_log_is_refused(
    client: TestClient, live_server: LiveServer, keys: Keys, coord: Coordinator
) -> None:
    """No reader hands out a cursor past the end of the log; one that arrives anyway
    (made up, another database's, or from before a restore that took the log back)
    would skip every event up to it, so it is refused, never echoed back."""
    coord.mkdir("a", "/one")
    _, end = coord.read_events(namespaces=["a"])
    headers = Keys.h(keys.a_read)
    page = ok(client.get(URL, params={"after": str(end), "wait": 0}, headers=headers))
    assert page == {"events": [], "cursor": str(end)}
    for beyond in (end + 1, 10**18):
        body = err(client.get(URL, params={"after": str(beyond), "wait": 0}, headers=headers),
                   409, "cursor_ahead")
        assert str(end) in body["error"]["message"]
        with pytest.raises(CursorAhead):
            coord.read_events(after=beyond, namespaces=["a"])
    with Client(live_server.url, api_key=keys.a_read) as http, pytest.raises(CursorAhead):
        http.read_events(after=end + 1, namespaces=["a"], wait=0)

    # A restore from an older backup: the log (and its position sequence) goes back.
    kept, _ = coord.read_events(namespaces=["a"])
    coord.mkdir("a", "/two")
    _, later = coord.read_events(after=end, namespaces=["a"])
    with coord.engine.begin() as conn:
        conn.execute(text("DELETE FROM events WHERE position > :end"), {"end": end})
        conn.execute(text("SELECT setval('event_position_seq', :v)"),
                     {"v": kept[-1].transaction_block * POSITION_BLOCK})
    body = err(client.get(URL, params={"after": str(later), "wait": 0}, headers=headers),
               409, "cursor_ahead")
    assert "after=now" in body["error"]["message"]


def test_a_follower_can_start_now_or_at_the_horizon_after_compaction(
    client: TestClient, live_server: LiveServer, keys: Keys, coord: Coordinator
) -> None:
    headers = Keys.h(keys.a_read)
    coord.mkdir("a", "/old")
    take_snapshot(coord.engine)
    assert compact(coord.engine, timedelta(0), force=True).events_deleted > 0
    coord.create_namespace("new")  # created after the compaction
    coord.mkdir("a", "/kept")
    new_key = create_key(coord.engine, ["new", "a"], "read")[1]

    # From the start: gone, and the answer says what to do over HTTP.
    for ns in ("a", "new"):
        body = err(client.get(f"/v1/namespaces/{ns}/events", params={"wait": 0},
                              headers=Keys.h(new_key)), 410, "cursor_expired")
        assert "after=horizon" in body["error"]["message"]
        assert "after=now" in body["error"]["message"]
    # At the horizon: every event still kept, then on as usual.
    page = ok(client.get(URL, params={"after": "horizon", "wait": 0}, headers=headers))
    assert [e["payload"]["path"] for e in page["events"]] == ["/kept"]
    new = ok(client.get("/v1/namespaces/new/events", params={"after": "horizon", "wait": 0},
                        headers=Keys.h(new_key)))
    assert [e["type"] for e in new["events"]] == ["namespace_created"]
    # Now: nothing before this moment, and a long poll wakes on the next commit.
    now = ok(client.get(URL, params={"after": "now", "wait": 0}, headers=headers))
    assert now["events"] == [] and int(now["cursor"]) >= int(page["cursor"])
    coord.mkdir("a", "/next")
    nxt = ok(client.get(URL, params={"after": now["cursor"], "wait": 5}, headers=headers))
    assert [e["payload"]["path"] for e in nxt["events"]] == ["/next"]
    # The Python API and the HTTP client take the same two words.
    events, cursor = coord.read_events(after="horizon", namespaces=["a"])
    assert [e.payload["path"] for e in events] == ["/kept", "/next"]
    assert coord.read_events(after="now", namespaces=["a"]) == ([], cursor)
    with Client(live_server.url, api_key=keys.a_read) as http:
        got, at = http.read_events(after="horizon", namespaces=["a"], wait=0)
        assert [e.position for e in got] == [e.position for e in events] and at == cursor
        with pytest.raises(CursorExpired):
            http.read_events(after=None, namespaces=["a"], wait=0)
    err(client.get(URL, params={"after": "later", "wait": 0}, headers=headers),
        400, "invalid_cursor")
