"""The app's structure: every route declares its scope check, the command routes are the
ones the route table lists (the client builds its requests from the same table), and
the app's parts are dependencies a test can override."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from http_support import Keys, ok

from coordinator import Coordinator
from coordinator.commands import COMMANDS
from pathkeeper.http.app import create_app
from pathkeeper.http.deps import SCOPE_CHECKS, get_searcher, get_settings
from pathkeeper.http.operations import (
    COMMAND_ROUTES,
    NAMESPACE_URL,
    NODE_BY_ID,
    NODE_BY_PATH,
    ROUTE_OF,
)
from pathkeeper.http.schemas import BODY_OF, SearchOut
from pathkeeper.http.settings import ServiceSettings


def offline_app() -> FastAPI:
    """The app, never started: nothing connects to this database."""
    return create_app(ServiceSettings(database_url="postgresql://nobody@127.0.0.1:9/none"))


def api_routes(routes: Iterable[Any]) -> Iterator[APIRoute]:
    """Every API route, also inside included routers (which newer FastAPI keeps as
    one entry of ``app.routes`` each)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from api_routes(inner.routes)


def scope_checks(dependant: Any) -> list[Callable[..., Any]]:
    found = [dependant.call] if dependant.call in SCOPE_CHECKS else []
    for sub in dependant.dependencies:
        found.extend(scope_checks(sub))
    return found


def test_every_route_declares_one_scope_check() -> None:
    app = offline_app()
    routes = list(api_routes(app.routes))
    assert len(routes) >= 20
    for route in routes:
        checks = set(scope_checks(route.dependant))
        assert len(checks) == 1, (route.path, route.methods, checks)
        # Only the probes, the metrics, the docs pages and the operator page's static
        # shell (its data comes from /v1 routes with a key) are public.
        public = SCOPE_CHECKS[checks.pop()] is None
        assert public == (route.path in ("/healthz", "/readyz", "/metrics", "/docs", "/redoc",
                                         "/ui", "/ui/app.js", "/ui/app.css")), route.path


def test_command_routes_come_from_the_table(settings: ServiceSettings) -> None:
    assert set(ROUTE_OF) == set(COMMANDS), "every command needs a row in COMMAND_ROUTES"
    app = create_app(settings)
    registered: dict[tuple[str, str], Callable[..., Any]] = {}
    for route in api_routes(app.routes):
        for method in route.methods:
            registered[(method, route.path)] = route.endpoint
    for row in COMMAND_ROUTES:
        if row.by_node:
            urls = [NAMESPACE_URL + form + row.suffix for form in (NODE_BY_PATH, NODE_BY_ID)]
        else:
            urls = [NAMESPACE_URL + row.suffix]
        endpoints = {registered[(row.method, url)] for url in urls}
        assert len(endpoints) == 1, f"{row.name}: one handler for both URL forms"
        # The body is the command's fields that neither the URL nor the query carries.
        body = BODY_OF[row.command]
        fields = {f.name for f in dataclasses.fields(row.command)} - {"op", "ref", *row.query}
        assert set(body.model_fields if body else ()) == fields
        if body is not None:
            assert body.model_config.get("extra") == "forbid"


def test_node_reads_have_one_handler_per_operation() -> None:
    app = offline_app()
    by_path = {(tuple(r.methods), r.path.removeprefix(NAMESPACE_URL + NODE_BY_PATH)): r.endpoint
               for r in api_routes(app.routes) if r.path.startswith(NAMESPACE_URL + "/node/")
               or r.path == NAMESPACE_URL + NODE_BY_PATH}
    by_id = {(tuple(r.methods), r.path.removeprefix(NAMESPACE_URL + NODE_BY_ID)): r.endpoint
             for r in api_routes(app.routes) if r.path.startswith(NAMESPACE_URL + NODE_BY_ID)}
    # stat and children, and every command that names a node
    node_commands = sum(1 for r in COMMAND_ROUTES if r.by_node)
    assert by_path.keys() == by_id.keys() and len(by_path) == 2 + node_commands
    assert all(by_path[k] is by_id[k] for k in by_path)


class StubSearcher:
    """Answers every search with one fixed page (no Elasticsearch)."""

    def search(self, query: Any) -> SearchOut:
        return SearchOut(hits=[], cursor=f"stub:{query.namespace}")

    def refresh(self) -> None:
        pass

    def index_lost(self) -> str | None:
        return None


def test_dependencies_can_be_overridden(make_client: Callable[..., TestClient], keys: Keys,
                                        coord: Coordinator, settings: ServiceSettings) -> None:
    client = make_client()  # no Elasticsearch URL: search is not configured
    app = client.app
    assert isinstance(app, FastAPI)
    h = Keys.h(keys.a_read)
    assert client.get("/v1/namespaces/a/search", params={"q": "x"}, headers=h
                      ).status_code == 503
    app.dependency_overrides[get_searcher] = StubSearcher
    # Settings too: a page of one node.
    app.dependency_overrides[get_settings] = lambda: replace(settings, max_page=1)
    try:
        page = ok(client.get("/v1/namespaces/a/search", params={"q": "x"}, headers=h))
        assert page == {"hits": [], "cursor": "stub:a"}
        coord.mkdir("a", "/d1")
        coord.mkdir("a", "/d2")
        listed = ok(client.get("/v1/namespaces/a/node/children", params={"path": "/"},
                               headers=h))
        assert [n["name"] for n in listed["nodes"]] == ["d1"] and listed["cursor"]
    finally:
        app.dependency_overrides.clear()
    listed = ok(client.get("/v1/namespaces/a/node/children", params={"path": "/"}, headers=h))
    assert [n["name"] for n in listed["nodes"]] == ["d1", "d2"]
