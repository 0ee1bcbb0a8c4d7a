"""The fast path (``pathkeeper.http.fast_path``) against FastAPI's own routes for commands
and node reads, on the real app and PostgreSQL.

The fast path answers a request only when FastAPI would accept every part of it;
everything else must reach FastAPI untouched. Here: what it serves and what it passes on
(its ``served`` count, and its asyncio pool, which FastAPI's handlers never use); the
same requests answered by the app with it and by the app without it, for what the
generated test (``test_http_fast_path_equality``) cannot send (a tree in a given state,
other content types and raw bodies, other keys and ways of sending one, a repeated query
parameter, an ``Idempotency-Key``); what it refuses to start on; dependency overrides.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Any

import pytest
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query
from fastapi.dependencies.utils import get_parameterless_sub_dependant
from fastapi.responses import JSONResponse
from http_support import Keys, err, ok
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*httpx2", category=UserWarning)
    from fastapi.testclient import TestClient

from coordinator import Coordinator
from coordinator import errors as ce
from coordinator.api_keys import create_key
from pathkeeper.http.app import create_app
from pathkeeper.http.deps import get_searcher, get_settings
from pathkeeper.http.fast_path import FastPath, FastPathRefused, routes_of
from pathkeeper.http.route_table import leaf_routes
from pathkeeper.http.settings import ServiceSettings


def without_fast_path(app: FastAPI) -> FastAPI:
    app.user_middleware = [m for m in app.user_middleware if m.cls is not FastPath]
    return app


def served(client: TestClient) -> int:
    count: int = client.app.state.fast_path.served  # type: ignore[attr-defined]
    return count


@pytest.mark.parametrize("lifespan", [True, False], ids=["asyncio-pool", "no-lifespan"])
def test_the_fast_path_serves_commands_and_reads_and_passes_the_rest_on(
    settings: ServiceSettings, open_app: Callable[[FastAPI], TestClient], keys: Keys,
    coord: Coordinator, lifespan: bool,
) -> None:
    """With the lifespan, the fast path sends on its asyncio pool; an app served without
    one (``--lifespan off``) has no pool, and it runs the coordinator in a thread."""
    app = create_app(settings)
    client = open_app(app) if lifespan else TestClient(app, raise_server_exceptions=False)
    if not lifespan:
        client.get("/healthz")  # builds the middleware stack
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
    assert served(client) == 8

    # Passed on, to FastAPI, which refuses them (or, with a key, records the rename).
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
    assert [r.status_code for r in passed_on] == [200, 422, 403, 422, 409]
    assert served(client) == 8
    # Without a key a request reaches neither: the limits refuse it first.
    for keyless in (client.post(f"{a}/node/rename", params={"path": "/e"}, json={"name": "z"}),
                    client.get(f"{a}/node", params={"path": "/e"})):
        assert (keyless.status_code, keyless.json()["error"]["code"]) == (401, "unauthorized")
    assert [n.name for n in coord.listdir("a", "/")] == ["g", "z"]
    ok(client.delete(f"{a}/node", params={"path": "/z", "recursive": "true"}, headers=h))
    ok(client.delete(f"{a}/nodes/{fid}", params={"if_version": "4"}, headers=h))
    assert coord.listdir("a", "/") == []
    assert served(client) == 10


# (method, URL after the namespace, body or raw bytes, extra headers, which key): what the
# generated test does not send. Each case's answer depends on the ones before it.
Case = tuple[str, str, Any, dict[str, str], str]
CASES: list[Case] = [
    ("POST", "/dirs", {"path": "/d"}, {}, "write"),
    ("POST", "/dirs", {"path": "/d"}, {}, "write"),  # exists
    ("POST", "/dirs", {"path": "/p/q", "parents": True}, {}, "write"),
    ("POST", "/dirs", {"path": "/x/y"}, {}, "write"),  # no parent
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
    ("PUT", "/node/content?path=/d/f", {"content": "v3", "if_version": 2},
     {"If-Match": '"3"'}, "write"),
    ("PUT", "/node/content?path=/d", {"content": "v3"}, {}, "write"),  # a directory
    ("PUT", "/node/metadata?path=/d", {"metadata": {"a": 1}}, {}, "write"),
    ("POST", "/node/rename?path=/d", {"name": "e"}, {}, "write"),
    ("POST", "/node/rename?path=/e", {"name": "p"}, {}, "write"),  # taken
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
    ("POST", "/node/rename?path=/p", {"name": "pp"}, {"Idempotency-Key": "once"}, "write"),
    ("POST", "/node/rename?path=/p", {"name": "pp"}, {"Idempotency-Key": "once"}, "write"),
    ("POST", "/node/rename?path=/pp", {"name": "ppp"}, {"Idempotency-Key": "once"}, "write"),
    ("POST", "/node/rename?path=/e&path=/pp", {"name": "r"}, {}, "write"),
    ("POST", "/dirs", {"path": "/t/u/v", "parents": True}, {}, "write"),
    ("DELETE", "/node?path=/t", None, {}, "write"),  # not empty
    ("DELETE", "/node?path=/t/u/v&if_version=7", None, {}, "write"),  # stale
    ("DELETE", "/node?path=/t/u/v&if_version=1", None, {"If-Match": '"2"'}, "write"),
    ("DELETE", "/node?path=/t/u/v&if_version=1&extra=1", None, {}, "write"),
    ("DELETE", "/node?path=/t/u&recursive=false&recursive=1", None, {}, "write"),
    ("DELETE", "/node?path=/t&recursive=yes", None, {"If-Match": '"1"'}, "write"),
    ("DELETE", "/node?path=/r&recursive=true", None, {}, "write"),
    ("GET", "/node?path=/q", None, {}, "read"),
    ("GET", "/node?path=/q", None, {"If-Match": "x" * 100}, "write"),
    ("GET", "/node?path=/q/f&path=/q", None, {}, "read"),
    ("GET", "/node?path=/q", None, {}, "other"),
    ("GET", "/node?path=/q", None, {}, "none"),
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


def test_with_and_without_the_fast_path_the_same_answers(
    settings: ServiceSettings, open_app: Callable[[FastAPI], TestClient], keys: Keys,
    coord: Coordinator,
) -> None:
    with_fast_path = open_app(create_app(settings))
    without = open_app(without_fast_path(create_app(settings)))
    keys_of = {
        "a": {"write": keys.a_write, "read": keys.a_read, "other": keys.b_write},
        "b": {"write": keys.b_write, "read": create_key(coord.engine, ["b"], "read")[1],
              "other": keys.a_write},
    }
    statuses = []
    for method, url, body, headers, key in CASES:
        answers = []
        for client, ns in ((with_fast_path, "a"), (without, "b")):
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
    # The fast path sent what it served on its asyncio pool; FastAPI's handlers never do.
    fast_pool = with_fast_path.app.state.statements.pool  # type: ignore[attr-defined]
    fastapi_pool = without.app.state.statements.pool  # type: ignore[attr-defined]
    assert served(with_fast_path) >= 15
    assert fast_pool.get_stats().get("requests_num", 0) >= 15
    assert fastapi_pool.get_stats().get("requests_num", 0) == 0
    # Both trees went through the same changes.
    assert ([(n.path, n.version) for n in coord.walk("a", "/")]
            == [(n.path, n.version) for n in coord.walk("b", "/")])


def test_auth_off_is_served_and_overrides_of_its_dependencies_go_to_fastapi(
    settings: ServiceSettings, open_app: Callable[[FastAPI], TestClient], coord: Coordinator,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A test that overrides a dependency of a hot route gets FastAPI's handlers, with the
    override applied, and the fast path says so (its count, a warning); an override of
    anything else leaves the fast path serving."""
    coord.create_namespace("a")
    app = create_app(replace(settings, auth=False))
    client = open_app(app)
    ok(client.post("/v1/namespaces/a/dirs", json={"path": "/d"}), 201)
    assert served(client) == 1
    app.dependency_overrides[get_searcher] = lambda: None
    ok(client.post("/v1/namespaces/a/dirs", json={"path": "/e"}), 201)
    assert (served(client), app.state.fast_path.stepped_aside) == (2, 0)
    # The handler's settings allow paths of 3 bytes: FastAPI's handler, under the override.
    app.dependency_overrides[get_settings] = lambda: replace(app.state.settings, max_path_bytes=3)
    with caplog.at_level(logging.WARNING, logger="pathkeeper.service"):
        err(client.post("/v1/namespaces/a/dirs", json={"path": "/long"}), 422, "invalid_path")
        ok(client.post("/v1/namespaces/a/dirs", json={"path": "/f"}), 201)
    assert (served(client), app.state.fast_path.stepped_aside) == (2, 2)
    assert sum("dependency overrides" in r.message for r in caplog.records) == 1
    app.dependency_overrides.clear()
    ok(client.post("/v1/namespaces/a/dirs", json={"path": "/long"}), 201)
    assert served(client) == 3
    assert [n.name for n in coord.listdir("a", "/")] == ["d", "e", "f", "long"]


def _rename_handler(app: FastAPI) -> Callable[..., Any]:
    route = next(r for r in leaf_routes(app.routes) if getattr(r, "name", "") == "rename_node")
    endpoint: Callable[..., Any] = route.endpoint  # type: ignore[attr-defined]
    return endpoint


async def audit() -> None:
    """A dependency the fast path has never heard of."""


def _with_audited_route(app: FastAPI) -> None:
    extra = APIRouter()
    extra.add_api_route("/v1/namespaces/{ns}/node/audited-rename", _rename_handler(app),
                        methods=["POST"], name="audited_rename", dependencies=[Depends(audit)])
    app.include_router(extra)


async def frozen() -> None:
    raise HTTPException(423, "frozen")


def _with_a_dependency_added_to_mkdir(app: FastAPI) -> Callable[[], None]:
    """The lane this replaced served ``mkdir`` past such a dependency (201, not 423).
    The route is shared by every app (its router is a module's): put back after."""
    route: Any = next(r for r in leaf_routes(app.routes) if getattr(r, "name", "") == "mkdir")
    added = get_parameterless_sub_dependant(depends=Depends(frozen), path=route.path)
    route.dependant.dependencies.append(added)
    return lambda: route.dependant.dependencies.remove(added)


def _with_extra_query(app: FastAPI) -> None:
    handler = _rename_handler(app)

    async def dry_run(dry: Annotated[bool, Query()] = False) -> None:
        del dry

    extra = APIRouter()
    extra.add_api_route("/v1/namespaces/{ns}/node/dry-rename", handler, methods=["POST"],
                        name="dry_rename")
    app.include_router(extra, dependencies=[Depends(dry_run)])


def _with_own_handler(app: FastAPI) -> None:
    async def not_found(_: Any, exc: Exception) -> JSONResponse:
        return JSONResponse({"gone": str(exc)}, 410)

    app.add_exception_handler(ce.NotFound, not_found)


def _with_inner_middleware(app: FastAPI) -> None:
    app.user_middleware.append(Middleware(GZipMiddleware))


@pytest.mark.parametrize("change, says", [
    (_with_audited_route, "'audited_rename': it depends on 'audit'"),
    (_with_a_dependency_added_to_mkdir, "'mkdir': it depends on 'frozen'"),
    (_with_extra_query, "included with dependencies"),
    (_with_own_handler, "exception handler for NotFound"),
    (_with_inner_middleware, "innermost middleware"),
])
def test_a_hot_route_with_what_the_fast_path_cannot_honour_refuses_to_start(
    settings: ServiceSettings, change: Callable[[FastAPI], Callable[[], None] | None],
    says: str,
) -> None:
    app = create_app(settings)
    routes_of(app)  # as built
    undo = change(app)
    try:
        with pytest.raises(FastPathRefused) as refused:
            routes_of(app)
        assert says in str(refused.value)
        with pytest.raises(FastPathRefused), TestClient(app):
            pass  # the stack is built at startup: the app does not start
    finally:
        if undo is not None:
            undo()


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_a_trailing_slash_gets_fastapis_redirect_not_the_fast_paths_work(
    settings: ServiceSettings, open_app: Callable[[FastAPI], TestClient], keys: Keys,
    coord: Coordinator, method: str,
) -> None:
    """``.../nodes/{id}/`` is not the node's URL: FastAPI answers 307 to the URL without
    the slash and does nothing; the fast path must not read or delete the node for it."""
    h = Keys.h(keys.a_write)
    answers = []
    for app in (create_app(settings), without_fast_path(create_app(settings))):
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
