"""The lane (``pathkeeper.http.lane``) against FastAPI's own routes for commands and
node reads, on the real app and PostgreSQL.

The lane answers a request only when FastAPI would accept every part of it; everything
else must reach FastAPI untouched. Two proofs: with FastAPI's command and node routes
removed, the common case is still served (so the lane, not FastAPI, served it) while
what the lane must pass on is not; and the same requests, good and bad, answered by the
app with the lane and by the app without it, get the same status, body and ETag.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from fastapi import FastAPI
from http_support import Keys, ok

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*httpx2", category=UserWarning)
    from fastapi.testclient import TestClient

from coordinator import Coordinator
from coordinator.api_keys import create_key
from pathkeeper.http.app import create_app
from pathkeeper.http.lane import Lane
from pathkeeper.http.routes import commands, nodes
from pathkeeper.http.settings import ServiceSettings


def _without_lane(app: FastAPI) -> FastAPI:
    app.user_middleware = [m for m in app.user_middleware if m.cls is not Lane]
    return app


def _without_lane_routes(app: FastAPI) -> FastAPI:
    """``app`` without FastAPI's routes for what the lane serves: the routers of
    ``routes.commands`` and ``routes.nodes`` (a node's read, and its children)."""
    gone = (commands.router, nodes.router)
    kept = [r for r in app.router.routes if getattr(r, "original_router", r) not in gone]
    assert len(kept) == len(app.router.routes) - 2
    app.router.routes = kept
    return app


def _no_route(resp: Any) -> bool:
    """Whether FastAPI's router answered: no route for this URL (or not this method)."""
    return (resp.status_code, resp.json()["error"]["message"]) in (
        (404, "Not Found"), (405, "Method Not Allowed"))


@pytest.mark.parametrize("lifespan", [True, False], ids=["asyncio-pool", "no-lifespan"])
def test_the_lane_serves_commands_and_reads_and_passes_the_rest_on(
    settings: ServiceSettings, open_app: Callable[[FastAPI], TestClient], keys: Keys,
    coord: Coordinator, lifespan: bool,
) -> None:
    """With the lifespan, the lane sends on its asyncio pool; an app served without one
    (``--lifespan off``) has no pool, and the lane runs the coordinator in a thread."""
    app = _without_lane_routes(create_app(settings))
    client = open_app(app) if lifespan else TestClient(app, raise_server_exceptions=False)
    assert (app.state.statements is not None) == lifespan
    h = Keys.h(keys.a_write)
    a = "/v1/namespaces/a"
    ok(client.post(f"{a}/dirs", json={"path": "/d"}, headers=h), 201)
    f = ok(client.post(f"{a}/files", json={"path": "/d/f", "content": "x"}, headers=h), 201)
    fid = f["node"]["id"]
    ok(client.put(f"{a}/node/content", params={"path": "/d/f"}, json={"content": "y"},
                  headers={**h, "If-Match": '"1"'}))
    ok(client.put(f"{a}/nodes/{fid}/metadata", json={"metadata": {"k": 1}}, headers=h))
    ok(client.post(f"{a}/node/rename", params={"path": "/d"}, json={"name": "e"}, headers=h))
    ok(client.post(f"{a}/nodes/{fid}/move", json={"dst": "/g"}, headers=h))
    node = coord.get("a", fid)
    assert (node.path, node.content, node.metadata, node.version) == ("/g", "y", {"k": 1}, 4)
    assert coord.stat("a", "/e").kind == "dir"
    by_path = client.get(f"{a}/node", params={"path": "/g"}, headers=Keys.h(keys.a_read))
    by_id = client.get(f"{a}/nodes/{fid}", headers=Keys.h(keys.a_read))
    for read in (by_path, by_id):
        assert ok(read)["content"] == "y" and read.headers["ETag"] == '"4"'

    # Passed on, to FastAPI, which here has no such route: nothing happens.
    passed_on = [
        client.post(f"{a}/node/rename", params={"path": "/e"}, json={"name": "z"},
                    headers={**h, "Idempotency-Key": "k1"}),
        client.post(f"{a}/node/rename", params={"path": "/e"}, content=b'{"name": "z"',
                    headers={**h, "Content-Type": "application/json"}),
        client.post(f"{a}/node/rename", params={"path": "/e"}, json={"name": "z"},
                    headers=Keys.h(keys.a_read)),
        client.delete(f"{a}/node", params={"path": "/e", "recursive": "maybe"}, headers=h),
        client.get(f"{a}/nodes/{fid}/children", headers=h),
    ]
    assert all(_no_route(r) for r in passed_on), [r.text for r in passed_on]
    # Without a key a request reaches neither: the limits refuse it first.
    for keyless in (client.post(f"{a}/node/rename", params={"path": "/e"}, json={"name": "z"}),
                    client.get(f"{a}/node", params={"path": "/e"})):
        assert (keyless.status_code, keyless.json()["error"]["code"]) == (401, "unauthorized")
    assert [n.name for n in coord.listdir("a", "/")] == ["e", "g"]
    ok(client.delete(f"{a}/node", params={"path": "/e", "recursive": "true"}, headers=h))
    ok(client.delete(f"{a}/nodes/{fid}", params={"if_version": "4"}, headers=h))
    assert coord.listdir("a", "/") == []


# (method, URL after the namespace, body or raw bytes, extra headers, which key).
Case = tuple[str, str, Any, dict[str, str], str]
CASES: list[Case] = [
    ("POST", "/dirs", {"path": "/d"}, {}, "write"),
    ("POST", "/dirs", {"path": "/d"}, {}, "write"),  # exists
    ("POST", "/dirs", {"path": "/p/q", "parents": True}, {}, "write"),
    ("POST", "/dirs", {"path": "/x/y"}, {}, "write"),  # no parent
    ("POST", "/dirs", {"path": "relative"}, {}, "write"),
    ("POST", "/dirs", {"path": "/" + "n" * 5000}, {}, "write"),
    ("POST", "/dirs", {"path": "/d2", "extra": 1}, {}, "write"),
    ("POST", "/dirs", {"path": 5}, {}, "write"),
    ("POST", "/dirs", b"[1, 2]", {"Content-Type": "application/json"}, "write"),
    ("POST", "/dirs", b'{"path": "/d3"}', {"Content-Type": "text/plain"}, "write"),
    ("POST", "/dirs", b'{"path": "/d3"}', {}, "write"),
    ("POST", "/dirs", b'{"path": "/d4"}', {"Content-Type": "application/json; charset=utf-8"},
     "write"),
    ("POST", "/files", {"path": "/d/f", "content": "hi", "metadata": {"k": [1]}}, {}, "write"),
    ("POST", "/files", {"path": "/d/f/g"}, {}, "write"),  # under a file
    ("POST", "/files", {"path": "/d/f"}, {}, "write"),  # exists
    ("PUT", "/node/content?path=/d/f", {"content": "v2"}, {"If-Match": '"1"'}, "write"),
    ("PUT", "/node/content?path=/d/f", {"content": "v3"}, {"If-Match": '"1"'}, "write"),
    ("PUT", "/node/content?path=/d/f", {"content": "v3"}, {"If-Match": "soon"}, "write"),
    ("PUT", "/node/content?path=/d/f", {"content": "v3", "if_version": 2},
     {"If-Match": '"3"'}, "write"),
    ("PUT", "/node/content?path=/d", {"content": "v3"}, {}, "write"),  # a directory
    ("PUT", "/node/content", {"content": "v3"}, {}, "write"),  # no path
    ("PUT", "/node/content?path=", {"content": "v3"}, {}, "write"),
    ("PUT", "/node/metadata?path=/d", {"metadata": {"a": 1}}, {}, "write"),
    ("PUT", "/node/metadata?path=/d", {"metadata": None}, {}, "write"),
    ("POST", "/node/rename?path=/d", {"name": "e"}, {}, "write"),
    ("POST", "/node/rename?path=/e", {"name": "a/b"}, {}, "write"),
    ("POST", "/node/rename?path=/e", {"name": "p"}, {}, "write"),  # taken
    ("POST", "/node/rename?path=/nowhere", {"name": "q"}, {}, "write"),
    ("POST", "/node/rename?path=/e", {"name": "q"}, {}, "read"),
    ("POST", "/node/rename?path=/e", {"name": "q"}, {}, "other"),
    ("POST", "/node/rename?path=/e", {"name": "q"}, {}, "none"),
    ("POST", "/node/rename?path=/e", {"name": "q"}, {"Authorization": "Bearer pk_nope"}, ""),
    ("POST", "/node/rename?path=/e", {"name": "q"}, {"Authorization": "Bearer"}, ""),
    ("POST", "/node/rename?path=/e", {"name": "q"}, {}, "basic"),
    ("POST", "/node/rename?path=/e", {"name": "q"}, {}, "spaced"),
    ("POST", "/node/rename?path=/q", {"name": "e"}, {}, "lower"),
    ("POST", "/node/rename/?path=/e", {"name": "q"}, {}, "write"),
    ("POST", "/node/move?path=/q", {"dst": "/q/inside"}, {}, "write"),
    ("POST", "/node/move?path=/q/f", {"dst": "/p/f"}, {}, "write"),
    ("POST", "/nodes/no-such-id/rename", {"name": "q"}, {}, "write"),
    ("POST", "/nodes/" + "i" * 65 + "/rename", {"name": "q"}, {}, "write"),
    ("POST", "/node/rename?path=/p", {"name": "pp"}, {"Idempotency-Key": "once"}, "write"),
    ("POST", "/node/rename?path=/p", {"name": "pp"}, {"Idempotency-Key": "once"}, "write"),
    ("POST", "/node/rename?path=/pp", {"name": "ppp"}, {"Idempotency-Key": "once"}, "write"),
    ("POST", "/node/rename?path=/e&path=/pp", {"name": "r"}, {}, "write"),
    ("POST", "/dirs", {"path": "/t/u/v", "parents": True}, {}, "write"),
    ("DELETE", "/node?path=/t", None, {}, "write"),  # not empty
    ("DELETE", "/node?path=/t&recursive=maybe", None, {}, "write"),
    ("DELETE", "/node?path=/t&recursive=", None, {}, "write"),
    ("DELETE", "/node?path=/t/u/v&if_version=0", None, {}, "write"),
    ("DELETE", "/node?path=/t/u/v&if_version=x", None, {}, "write"),
    ("DELETE", "/node?path=/t/u/v&if_version=7", None, {}, "write"),  # stale
    ("DELETE", "/node?path=/t/u/v&if_version=1", None, {"If-Match": '"2"'}, "write"),
    ("DELETE", "/node?path=/t/u/v&if_version=1&extra=1", None, {}, "write"),
    ("DELETE", "/node?path=/t/u&recursive=false&recursive=1", None, {}, "write"),
    ("DELETE", "/node?path=/t&recursive=yes", None, {"If-Match": '"1"'}, "write"),
    ("DELETE", "/node?path=/r&recursive=true", None, {}, "write"),
    ("GET", "/node?path=/q", None, {}, "read"),
    ("GET", "/node?path=/q", None, {"If-Match": "x" * 100}, "write"),
    ("GET", "/node?path=/q/f&path=/q", None, {}, "read"),
    ("GET", "/node?path=/q/nowhere", None, {}, "read"),
    ("GET", "/node?path=q", None, {}, "read"),
    ("GET", "/node?path=/" + "n" * 5000, None, {}, "read"),
    ("GET", "/node", None, {}, "read"),
    ("GET", "/node?path=/q", None, {}, "other"),
    ("GET", "/node?path=/q", None, {}, "none"),
    ("GET", "/nodes/no-such-id", None, {}, "read"),
    ("GET", "/nodes/" + "i" * 65, None, {}, "read"),
]


#: Other ways of sending the write key.
AUTHORIZATION = {"basic": "Basic {}", "spaced": "Bearer    {}  ", "lower": "bearer {}"}


def _normalised(resp: Any, ns: str) -> tuple[int, Any]:
    body = resp.json()
    if "node" in body:  # ids, seqs and times differ between the namespaces
        node = body["node"]
        return resp.status_code, (node["path"], node["kind"], node.get("content"),
                                  node.get("metadata"), body["version"], body["seq"] is None)
    if "path" in body:  # a node read
        return resp.status_code, (body["path"], body["kind"], body.get("content"),
                                  body.get("metadata"), body["version"], resp.headers["ETag"])
    if "error" in body:
        body["error"]["message"] = body["error"]["message"].replace(repr(ns), "NS")
    return resp.status_code, body


def test_with_and_without_the_lane_the_same_answers(
    settings: ServiceSettings, open_app: Callable[[FastAPI], TestClient], keys: Keys,
    coord: Coordinator,
) -> None:
    with_lane = open_app(create_app(settings))
    without = open_app(_without_lane(create_app(settings)))
    keys_of = {
        "a": {"write": keys.a_write, "read": keys.a_read, "other": keys.b_write},
        "b": {"write": keys.b_write, "read": create_key(coord.engine, ["b"], "read")[1],
              "other": keys.a_write},
    }
    statuses = []
    for method, url, body, headers, key in CASES:
        answers = []
        for client, ns in ((with_lane, "a"), (without, "b")):
            all_headers = dict(headers)
            if key in keys_of[ns]:
                all_headers["Authorization"] = f"Bearer {keys_of[ns][key]}"
            elif key in AUTHORIZATION:
                all_headers["Authorization"] = AUTHORIZATION[key].format(keys_of[ns]["write"])
            raw = isinstance(body, bytes)
            resp = client.request(
                method, f"/v1/namespaces/{ns}{url}", headers=all_headers,
                content=body if raw else None, json=None if raw else body,
            )
            answers.append(_normalised(resp, ns))
        assert answers[0] == answers[1], (method, url, body, headers, key)
        statuses.append(answers[0][0])
    # The cases reach every kind of answer, so neither app answered them all alike.
    assert {200, 201, 400, 401, 403, 404, 409, 422} <= set(statuses)
    # The lane sent what it served on its asyncio pool; FastAPI's handlers never do.
    lane_pool = with_lane.app.state.statements.pool  # type: ignore[attr-defined]
    fastapi_pool = without.app.state.statements.pool  # type: ignore[attr-defined]
    assert lane_pool.get_stats().get("requests_num", 0) >= 20
    assert fastapi_pool.get_stats().get("requests_num", 0) == 0
    # Both trees went through the same changes.
    assert ([(n.path, n.version) for n in coord.walk("a", "/")]
            == [(n.path, n.version) for n in coord.walk("b", "/")])


def test_lane_under_auth_off_and_overrides(
    settings: ServiceSettings, open_app: Callable[[FastAPI], TestClient], coord: Coordinator,
) -> None:
    coord.create_namespace("a")
    no_auth = open_app(_without_lane_routes(create_app(replace(settings, auth=False))))
    ok(no_auth.post("/v1/namespaces/a/dirs", json={"path": "/d"}), 201)
    # With a dependency overridden (tests swap the app's parts), FastAPI serves.
    app = _without_lane_routes(create_app(replace(settings, auth=False)))
    app.dependency_overrides[object] = object
    overridden = open_app(app)
    assert _no_route(overridden.post("/v1/namespaces/a/dirs", json={"path": "/e"}))
    assert [n.name for n in coord.listdir("a", "/")] == ["d"]


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_a_trailing_slash_gets_fastapis_redirect_not_the_lanes_work(
    settings: ServiceSettings, open_app: Callable[[FastAPI], TestClient], keys: Keys,
    coord: Coordinator, method: str,
) -> None:
    """``.../nodes/{id}/`` is not the node's URL: FastAPI answers 307 to the URL without
    the slash and does nothing; the lane must not read or delete the node for it."""
    h = Keys.h(keys.a_write)
    answers = []
    for app in (create_app(settings), _without_lane(create_app(settings))):
        client = open_app(app)
        created = ok(client.post("/v1/namespaces/a/files", json={"path": "/f"}, headers=h), 201)
        node_id = created["node"]["id"]
        resp = client.request(method, f"/v1/namespaces/a/nodes/{node_id}/", headers=h,
                              follow_redirects=False)
        answers.append((resp.status_code, resp.headers.get("location", "").split("/nodes/")[-1]
                        .replace(node_id, "ID")))
        assert coord.stat("a", "/f").id == node_id  # still there
        ok(client.delete(f"/v1/namespaces/a/nodes/{node_id}", headers=h))
    assert answers[0] == answers[1] == (307, "ID")
