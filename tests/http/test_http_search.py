"""Search through the real app, indexed by the real indexer worker (never by hand)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from http_support import Keys, err, ok

from indexer.worker import Worker

A = "/v1/namespaces/a"


@pytest.fixture
def search_client(make_client: Callable[..., TestClient], es_url: str, alias: str,
                  keys: Keys) -> TestClient:
    return make_client(es_url=es_url, index_alias=alias)


def search(client: TestClient, key: str, ns: str = "a", **params: Any) -> dict[str, Any]:
    return ok(client.get(f"/v1/namespaces/{ns}/search", params=params, headers=Keys.h(key)))


def test_read_your_writes_and_filters(search_client: TestClient, keys: Keys,
                                      worker: Worker) -> None:
    c, h = search_client, Keys.h(keys.a_write)
    ok(c.post(f"{A}/dirs", json={"path": "/clinton/projects/es", "parents": True}, headers=h),
       201)
    ok(c.post(f"{A}/files", json={"path": "/clinton/projects/es/README.txt",
                                  "content": "hello elastic world"}, headers=h), 201)
    ok(c.post(f"{A}/files", json={"path": "/clinton/notes.txt", "content": "hello notes"},
              headers=h), 201)
    ok(c.post(f"{A}/files", json={"path": "/other.txt", "content": "unrelated"}, headers=h),
       201)
    # The same words in another namespace must never show up in a's results.
    ok(c.post("/v1/namespaces/b/files", json={"path": "/clinton.txt", "content": "hello"},
              headers=Keys.h(keys.b_write)), 201)
    renamed = ok(c.post(f"{A}/node/rename", params={"path": "/clinton"},
                        json={"name": "bill"}, headers=h))

    found = search(c, keys.a_read, q="hello", min_seq=renamed["seq"])
    assert sorted(hit["path"] for hit in found["hits"]) == [
        "/bill/notes.txt", "/bill/projects/es/README.txt"]

    assert ok(c.get("/v1/indexed", params={"seq": renamed["seq"]}, headers=h)) == {
        "indexed": True}
    assert ok(c.get("/v1/indexed", params={"seq": 10**15, "timeout": 0.1}, headers=h)) == {
        "indexed": False}
    ready = ok(c.get("/readyz"))  # the worker has applied everything written so far
    assert (ready["indexer_lag_events"], ready["indexer_lag_seconds"]) == (0, 0.0)

    under = search(c, keys.a_read, under="/bill")
    assert [hit["path"] for hit in under["hits"]] == [
        "/bill", "/bill/notes.txt", "/bill/projects", "/bill/projects/es",
        "/bill/projects/es/README.txt"]
    assert search(c, keys.a_read, under="/clinton")["hits"] == []
    exact = search(c, keys.a_read, dir="/bill")
    assert [hit["path"] for hit in exact["hits"]] == ["/bill/notes.txt", "/bill/projects"]
    dirs = search(c, keys.a_read, kind="dir", under="/bill/projects")
    assert [hit["path"] for hit in dirs["hits"]] == ["/bill/projects", "/bill/projects/es"]
    assert [h["path"] for h in search(c, keys.a_read, q="bill")["hits"]] == ["/bill"]  # name
    # Query syntax in q is plain text: no error, and no match-all.
    assert search(c, keys.a_read, q='hello AND (x OR "* :')["hits"] == []
    assert search(c, keys.a_read, q="*")["hits"] == []

    err(c.get(f"{A}/search", params={"dir": "/bill/notes.txt"}, headers=h), 409,
        "not_a_directory")
    err(c.get(f"{A}/search", params={"under": "rel"}, headers=h), 422, "invalid_path")
    err(c.get(f"{A}/search", params={"cursor": "!!"}, headers=h), 400, "invalid_cursor")
    err(c.get("/v1/namespaces/zz/search", headers=Keys.h(keys.admin)), 404, "not_found")


def test_pagination(search_client: TestClient, keys: Keys, worker: Worker) -> None:
    c, h = search_client, Keys.h(keys.a_write)
    last: dict[str, Any] = {}
    for i in range(23):
        last = ok(c.post(f"{A}/files", json={"path": f"/f{i:02d}", "content": "common word"},
                         headers=h), 201)
    for params in ({"q": "common"}, {"kind": "file"}):
        seen: list[str] = []
        cursor = None
        while True:
            page = search(c, keys.a_read, limit=5, min_seq=last["seq"],
                          **params, **({"cursor": cursor} if cursor else {}))
            seen += [hit["path"] for hit in page["hits"]]
            cursor = page["cursor"]
            if cursor is None:
                break
        assert seen == [f"/f{i:02d}" for i in range(23)], params  # path order, no repeats


def test_search_unavailable_or_lagging(make_client: Callable[..., TestClient], es_url: str,
                                       alias: str, keys: Keys) -> None:
    h = Keys.h(keys.a_read)
    r = make_client().get(f"{A}/search", params={"q": "x"}, headers=h)
    err(r, 503, "unavailable")
    assert r.headers["Retry-After"]
    # No worker runs: the wait for min_seq is bounded, then 503 with Retry-After.
    lagging = make_client(es_url=es_url, index_alias=alias, max_index_wait_seconds=0.2)
    r = lagging.get(f"{A}/search", params={"q": "x", "min_seq": 10**12}, headers=h)
    err(r, 503, "index_lagging")
    assert r.headers["Retry-After"]


def test_search_on_a_server_that_is_no_supported_engine_says_so(
        make_client: Callable[..., TestClient], other_server: str, keys: Keys) -> None:
    r = make_client(es_url=other_server).get(f"{A}/search", params={"q": "x"},
                                             headers=Keys.h(keys.a_read))
    body = err(r, 503, "unavailable")
    assert "supported: Elasticsearch 8.x, 9.x; OpenSearch 2.x, 3.x" in body["error"]["message"]
