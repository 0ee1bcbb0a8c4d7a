"""API keys: 401 without a valid key, 403 without the scope, and namespace isolation:
a key for "a" cannot read, list, search or change "b", by path or by id, and cannot
tell "b" exists (the answer equals that for a namespace that does not exist)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from http_support import Keys, err, ok

from coordinator import Coordinator
from coordinator.api_keys import revoke_key


def requests_on(ns: str, node_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """One request of every kind on namespace ``ns`` (``node_id`` is a node of it)."""
    base = f"/v1/namespaces/{ns}"
    by_id = f"{base}/nodes/{node_id}"
    return [
        ("GET", f"{base}/node", {"params": {"path": "/d"}}),
        ("GET", by_id, {}),
        ("GET", f"{base}/node/children", {"params": {"path": "/"}}),
        ("GET", f"{by_id}/children", {}),
        ("GET", f"{base}/search", {"params": {"q": "secret"}}),
        ("GET", f"{base}/events", {}),
        ("POST", f"{base}/dirs", {"json": {"path": "/x"}}),
        ("POST", f"{base}/files", {"json": {"path": "/y"}}),
        ("PUT", f"{base}/node/content", {"params": {"path": "/d/f"}, "json": {"content": "!"}}),
        ("PUT", f"{by_id}/content", {"json": {"content": "!"}}),
        ("POST", f"{base}/node/rename", {"params": {"path": "/d"}, "json": {"name": "e"}}),
        ("POST", f"{by_id}/rename", {"json": {"name": "e"}}),
        ("POST", f"{base}/node/move", {"params": {"path": "/d"}, "json": {"dst": "/e"}}),
        ("POST", f"{by_id}/move", {"json": {"dst": "/e"}}),
        ("DELETE", f"{base}/node", {"params": {"path": "/d", "recursive": "true"}}),
        ("DELETE", by_id, {"params": {"recursive": "true"}}),
        ("POST", f"{base}/batch", {"json": {"operations": [{"op": "mkdir", "path": "/z"}]}}),
        ("DELETE", base, {"params": {"force": "true"}}),
    ]


def test_namespace_isolation(client: TestClient, keys: Keys, coord: Coordinator) -> None:
    coord.mkdir("b", "/d")
    f = coord.create_file("b", "/d/f", "secret")
    before = [(n.path, n.version, n.content) for n in coord.walk("b")]
    for key in (keys.a_write, keys.a_read):
        for method, url, kw in requests_on("b", f.node.id):
            r = client.request(method, url, headers=Keys.h(key), **kw)
            body = err(r, 404, "not_found")
            # Exactly what a namespace that does not exist gets.
            ghost = client.request(method, url.replace("/namespaces/b", "/namespaces/nope"),
                                   headers=Keys.h(key), **kw)
            assert ghost.status_code == 404
            assert body["error"]["message"].replace("'b'", "'nope'") == (
                ghost.json()["error"]["message"]), (method, url)
        # Node ids of b through a's namespace: b's node is simply not there.
        err(client.get(f"/v1/namespaces/a/nodes/{f.node.id}", headers=Keys.h(key)), 404,
            "not_found")
        err(client.put(f"/v1/namespaces/a/nodes/{f.node.id}/content", json={"content": "!"},
                       headers=Keys.h(keys.a_write)), 404, "not_found")
    assert [(n.path, n.version, n.content) for n in coord.walk("b")] == before
    assert ok(client.get("/v1/namespaces", headers=Keys.h(keys.a_read)))["namespaces"] == ["a"]


def test_unauthenticated_and_scopes(client: TestClient, keys: Keys, coord: Coordinator) -> None:
    url = "/v1/namespaces/a/node"
    r = client.get(url, params={"path": "/"})
    err(r, 401, "unauthorized")
    assert r.headers["WWW-Authenticate"] == "Bearer"
    err(client.get(url, params={"path": "/"}, headers={"Authorization": "Bearer pk_nope"}),
        401, "unauthorized")
    err(client.get(url, params={"path": "/"}, headers={"Authorization": "Basic abc"}), 401,
        "unauthorized")
    # Read scope reads but cannot write; write cannot manage namespaces.
    ok(client.get(url, params={"path": "/"}, headers=Keys.h(keys.a_read)))
    err(client.post("/v1/namespaces/a/dirs", json={"path": "/x"},
                    headers=Keys.h(keys.a_read)), 403, "forbidden")
    err(client.post("/v1/namespaces/a/batch", json={"operations": [
        {"op": "mkdir", "path": "/x"}]}, headers=Keys.h(keys.a_read)), 403, "forbidden")
    err(client.delete("/v1/namespaces/a", headers=Keys.h(keys.a_write)), 403, "forbidden")
    # Revocation (this app's auth cache is off).
    from coordinator.api_keys import list_keys

    a_read_id = next(k.id for k in list_keys(coord.engine) if k.namespaces == ["a"]
                     and k.scope == "read")
    assert revoke_key(coord.engine, a_read_id)
    err(client.get(url, params={"path": "/"}, headers=Keys.h(keys.a_read)), 401,
        "unauthorized")
    assert coord.namespaces() == ["a", "b"]


def test_no_auth_mode(make_client: Callable[..., TestClient], keys: Keys) -> None:
    client = make_client(auth=False)
    ok(client.post("/v1/namespaces/b/dirs", json={"path": "/open"}), 201)
    ok(client.post("/v1/namespaces", json={"name": "dev"}), 201)
