"""GET /v1/namespaces/{ns}/events: a follower that reconnects after every page gets every
event of its namespace exactly once, in commit order, while writers run concurrently."""

from __future__ import annotations

import threading
import time

import httpx
from http_support import Keys, LiveServer, err, ok

from coordinator import Coordinator

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
