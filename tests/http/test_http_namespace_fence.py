"""A namespace frozen on this server (being moved: docs/sharding.md) answers its writes
503 with ``Retry-After: 1`` and code ``namespace_frozen``, through the real app (the
fast path of lone writes, a batch, an import), while its reads and other namespaces'
writes go on; one that is not on this server any more is 503 ``namespace_moved``."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient
from http_support import Keys, err, ok
from sqlalchemy import text

from coordinator import Coordinator

A = "/v1/namespaces/a"


def place(coord: Coordinator, ns: str, state: str) -> None:
    with coord.engine.begin() as conn:
        conn.execute(text("INSERT INTO namespace_placement (namespace, state, frozen_at) "
                          "VALUES (:ns, :st, 0)"), {"ns": ns, "st": state})


def test_a_frozen_namespace_answers_503_retry_after_one_second(
    make_client: Callable[..., TestClient], keys: Keys, coord: Coordinator
) -> None:
    # A longer Retry-After for outages does not apply: a freeze lasts under a second.
    client = make_client(retry_after_seconds=7)
    coord.mkdir("a", "/d")
    place(coord, "a", "frozen")
    h = Keys.h(keys.admin)
    refused = [
        client.post(f"{A}/dirs", json={"path": "/x"}, headers=h),
        client.post(f"{A}/node/rename", params={"path": "/d"}, json={"name": "e"}, headers=h),
        client.post(f"{A}/batch", json={"operations": [{"op": "mkdir", "path": "/y"}]},
                    headers=h),
        client.post(f"{A}/import", content=b'{"path": "/i", "kind": "dir"}\n', headers=h),
    ]
    for resp in refused:
        err(resp, 503, "namespace_frozen")
        assert resp.headers["Retry-After"] == "1"
    assert ok(client.get(f"{A}/node", params={"path": "/d"}, headers=h))["name"] == "d"
    ok(client.post("/v1/namespaces/b/dirs", json={"path": "/x"}, headers=h), 201)
    assert [c.name for c in coord.listdir("a", "/")] == ["d"]


def test_a_namespace_moved_away_answers_503_namespace_moved(
    client: TestClient, keys: Keys, coord: Coordinator
) -> None:
    place(coord, "a", "gone")
    resp = client.post(f"{A}/dirs", json={"path": "/x"}, headers=Keys.h(keys.admin))
    err(resp, 503, "namespace_moved")
    assert "Retry-After" in resp.headers
