"""Over HTTP, content past ``Settings.max_content_bytes`` is 413 ``too_large`` on every
write route (the lone commands, a batch, the streamed import, which no body cap
bounds), and nothing of the request is written."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from fastapi.testclient import TestClient
from http_support import Keys

from coordinator import Coordinator
from coordinator.settings import Settings

LIMIT = 1000
AT_LIMIT = "é" * 500  # 1,000 bytes of UTF-8
OVER = "é" * 501


def test_every_write_route_refuses_content_over_the_limit_with_413(
    make_client: Callable[..., TestClient], keys: Keys, coord: Coordinator
) -> None:
    http = make_client(coordinator=replace(Settings(), max_content_bytes=LIMIT))
    auth = Keys.h(keys.a_write)
    coord.create_file("a", "/f", "small")
    base = "/v1/namespaces/a"
    answers = [
        http.post(f"{base}/files", json={"path": "/big", "content": OVER}, headers=auth),
        http.put(f"{base}/node/content", params={"path": "/f"}, json={"content": OVER},
                 headers=auth),
        http.post(f"{base}/batch", headers=auth, json={"operations": [
            {"op": "mkdir", "path": "/g"},
            {"op": "create_file", "path": "/big", "content": OVER}]}),
        http.post(f"{base}/import", headers=auth, content=json.dumps(
            {"path": "/big", "kind": "file", "content": OVER}) + "\n"),
    ]
    for resp in answers:
        assert resp.status_code == 413, resp.text
        assert resp.json()["error"]["code"] == "too_large"
        assert "1002 bytes, more than the limit of 1000" in resp.json()["error"]["message"]
    assert sorted(n.path for n in coord.walk("a")) == ["/", "/f"]
    assert coord.stat("a", "/f").content == "small"
    ok = http.post(f"{base}/files", json={"path": "/a", "content": AT_LIMIT}, headers=auth)
    assert ok.status_code == 201, ok.text
