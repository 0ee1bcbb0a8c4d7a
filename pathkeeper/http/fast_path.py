"""The hot routes' common case (a command, a node's read), served without FastAPI's
request machinery, by the routes FastAPI itself defines.

A rename over HTTP spent about 0.9 ms of server CPU per request on this project's
2-vCPU machines (``bench/bench_http.py``, 2 workers), of which the coordinator's own
part is about 0.2 ms: the rest was routing, dependency solving and parameter
validation, paid for every request. This ASGI middleware, the innermost of the app's,
serves a request to a route whose handler runs one of ``calls`` (``calls.serving``) with
the same call, and nothing it could get wrong:

- Its table is FastAPI's route table (``routes_of``, read when the middleware stack is
  built and by ``create_app``): a request goes to the route FastAPI's router would pick
  (the first whose path and method match, routes of included routers in place), and
  each route's path, query and header parameters and its JSON body are validated by
  that route's own fields (the validators FastAPI built for it, read as FastAPI reads
  each part: ``Param``); its scope is the one of the
  route's scope check (``deps.SCOPE_CHECKS``), declared once, on the route.
- It refuses to start (``FastPathRefused``) on a hot route carrying anything it does not
  honour: a dependency it does not know (on the route, its router's inclusion or the
  app), a parameter its call does not take, a cookie, a route class of its own, a body
  size limit, an exception handler of the coordinator's errors that is not the app's,
  or a middleware inside it.
- It steps aside for anything else: an ``Idempotency-Key`` (recorded with the change:
  FastAPI's handler does that), a part FastAPI would refuse (its error is FastAPI's to
  give), a body that is not ``application/json``; and, while ``dependency_overrides``
  replace one of the hot routes' dependencies, every hot request, counted in
  ``stepped_aside`` and logged once (so a test that overrides a dependency runs FastAPI's
  handlers, and says so). The body already read is replayed to FastAPI.

What it answers itself is the work's outcome: the call's result, or its coordinator
error in the one JSON shape (``errors``). ``tests/http/test_http_fast_path.py`` sends the
same requests, generated over the whole OpenAPI document, to the app with it and without.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from re import Pattern
from typing import Any, get_args
from urllib.parse import parse_qsl

from fastapi import FastAPI, params
from fastapi._compat import field_annotation_is_sequence, lenient_issubclass
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.middleware import Middleware
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator import errors as ce
from pathkeeper.http import errors as service_errors
from pathkeeper.http.auth import PRINCIPAL_SCOPE_KEY, Authenticator, bearer_of
from pathkeeper.http.calls import CALL_OF, Backend, Call
from pathkeeper.http.deps import (
    BEARER,
    READ,
    SCOPE_CHECKS,
    WRITE,
    NodeRef,
    by_id,
    by_path,
    current_principal,
    get_authenticator,
    get_coordinator,
    get_settings,
    node_ref,
    principal_of,
)
from pathkeeper.http.errors import POOL_TIMEOUTS, coordinator_response, pool_timeout_response
from pathkeeper.http.route_table import leaf_routes
from pathkeeper.http.settings import ServiceSettings

log = logging.getLogger("pathkeeper.service")


class FastPathRefused(RuntimeError):
    """A hot route carries something the fast path cannot honour: the app must not start
    (serving it here would skip it silently)."""


class Decline(Exception):
    """The fast path does not answer this request: FastAPI will."""


#: The dependencies the fast path honours, and how: the app's parts (from ``app.state``),
#: the node of the URL (``by_path`` / ``by_id`` declare its parameter, ``node_ref`` reads
#: it), the caller (``current_principal`` and the bearer scheme it declares) and the scope
#: checks on the namespace of the path (their scope, from ``SCOPE_CHECKS``).
PARTS = frozenset({get_coordinator, get_settings, get_authenticator})
NODE = frozenset({by_path, by_id, node_ref})
CALLER = frozenset({current_principal, BEARER})
NAMESPACE_SCOPE_CHECKS = frozenset({READ, WRITE})
KNOWN: frozenset[Any] = PARTS | NODE | CALLER | NAMESPACE_SCOPE_CHECKS

#: Path parameters: the namespace and a node's id.
NS, NODE_ID = "ns", "node_id"
#: The query parameter ``by_path`` declares.
PATH = "path"
#: Headers: the one that sends a request to FastAPI, the compare-and-swap one.
IDEMPOTENCY_KEY, IF_MATCH = "idempotency-key", "if-match"


@dataclass(frozen=True)
class Param:
    """A path, query or header parameter of a route, read as FastAPI reads it: by its
    alias (a header's with ``-`` for ``_``), the last value of a query parameter, the
    route's default when absent, validated by the route's own field."""

    name: str
    alias: str
    field: Any
    required: bool
    validate_default: bool

    @classmethod
    def of(cls, field: Any) -> Param:
        info = field.field_info
        alias: str = field.alias
        if isinstance(info, params.Header):  # looked up in ``_headers``: lower case
            if getattr(info, "convert_underscores", True) and alias == field.name:
                alias = alias.replace("_", "-")
            alias = alias.lower()
        return cls(field.name, alias, field, info.is_required(),
                   bool(getattr(info, "validate_default", False)))

    def value(self, received: Mapping[str, Any], values: dict[str, Any]) -> Any:
        """The parameter's value in ``received``; ``Decline`` where FastAPI refuses it."""
        value = received.get(self.alias)
        if value is None:
            if self.required:
                raise Decline
            value = copy.deepcopy(self.field.default)
            if not self.validate_default:
                return value
        valid, errors = self.field.validate(value, values, loc=())
        if errors:
            raise Decline
        return valid


@dataclass(frozen=True)
class HotRoute:
    """One route of FastAPI's table the fast path serves, as it reads it."""

    route: APIRoute
    call: Call
    scope: str
    path_params: tuple[Param, ...]
    query_params: tuple[Param, ...]
    header_params: tuple[Param, ...]
    body_field: Any | None
    #: Whether the handler takes the node of the URL (``node_ref``).
    by_node: bool
    #: Every dependency of the route: an override of any of them sends it to FastAPI.
    dependencies: frozenset[Any]


@dataclass(frozen=True)
class Candidate:
    """A route of the table in the router's order: its own matching, or (``hot``) the
    route the fast path serves."""

    regex: Pattern[str] | None
    methods: frozenset[str]
    route: BaseRoute
    hot: HotRoute | None


def _dependants(root: Dependant) -> Iterator[Dependant]:
    for sub in root.dependencies:
        yield sub
        yield from _dependants(sub)


def _unique(fields: Iterable[Any]) -> tuple[Any, ...]:
    """Fields by alias, once each (the namespace is both the handler's and its check's)."""
    seen: dict[str, Any] = {}
    for field in fields:
        seen.setdefault(field.alias, field)
    return tuple(seen.values())


def _params(fields: tuple[Any, ...], refuse: Callable[[str], FastPathRefused]
            ) -> tuple[Param, ...]:
    for field in fields:
        annotation = field.field_info.annotation
        if field_annotation_is_sequence(annotation) or any(
                lenient_issubclass(a, BaseModel) for a in (annotation, *get_args(annotation))):
            raise refuse(f"its parameter {field.alias!r} is a list or a model")
    return tuple(Param.of(field) for field in fields)


def _hot(route: APIRoute, call: Call) -> HotRoute:
    name = route.name

    def refuse(what: str) -> FastPathRefused:
        return FastPathRefused(f"the fast path cannot serve route {name!r}: {what}")

    if type(route) is not APIRoute:
        raise refuse(f"its route class {type(route).__name__} is not FastAPI's")
    if getattr(route, "max_body_size", None) is not None:
        raise refuse("it has a body size limit of its own")
    methods = route.methods or set()
    if len(methods) != 1:
        raise refuse(f"it has not one method but {sorted(methods)}")
    nodes = [route.dependant, *_dependants(route.dependant)]
    calls = frozenset(d.call for d in nodes[1:] if d.call is not None)
    for unknown in calls - KNOWN:
        raise refuse(f"it depends on {getattr(unknown, '__qualname__', unknown)!r}")
    root = route.dependant  # the handler: what the known dependencies take is known
    if (root.cookie_params or root.response_param_name or root.background_tasks_param_name
            or root.security_scopes_param_name or root.http_connection_param_name):
        raise refuse("its handler takes a cookie, the response, background tasks, security "
                     "scopes or the connection")
    scopes = {s for c in calls & NAMESPACE_SCOPE_CHECKS if (s := SCOPE_CHECKS[c]) is not None}
    if len(scopes) != 1:
        raise refuse(f"it declares {len(scopes)} scope checks on the namespace, not one")
    by_node = node_ref in calls
    paths = _unique(f for d in nodes for f in d.path_params)
    queries = _unique(f for d in nodes for f in d.query_params)
    headers = _unique(f for d in nodes for f in d.header_params)
    bodies = _unique(f for d in nodes for f in d.body_params)
    takes_query = {*call.query_names, *((PATH,) if by_path in calls else ())}
    for what, given, taken in (
        ("path parameter", {f.alias for f in paths}, {NS, NODE_ID}),
        ("query parameter", {f.alias for f in queries}, takes_query),
        ("header", {f.alias.lower() for f in headers},
         {IDEMPOTENCY_KEY, *((IF_MATCH,) if call.takes_if_match else ())}),
    ):
        for extra in sorted(given - taken):
            raise refuse(f"its {what} {extra!r} is not one its call takes")
    if NS not in {f.alias for f in paths}:
        raise refuse("its path has no namespace")
    body = bodies[0] if bodies else None
    model = None if body is None else body.field_info.annotation
    if len(bodies) > 1 or model is not call.body_model or getattr(
            getattr(body, "field_info", None), "embed", False):
        raise refuse(f"its body is not its call's ({call.body_model!r})")
    return HotRoute(route, call, scopes.pop(), _params(paths, refuse), _params(queries, refuse),
                    _params(headers, refuse), body, by_node, calls)


def _check_inclusions(routes: Iterable[Any]) -> None:
    """Refuse a router of hot routes included with anything added to its requests
    (dependencies, a prefix, a body size limit): ``leaf_routes`` shows the routes alone."""
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI's include_router
        if included is None:
            continue
        context = getattr(route, "include_context", None)
        if context is not None and (context.dependencies or context.prefix
                                    or context.max_body_size is not None):
            hot = [getattr(r, "name", r) for r in leaf_routes(included.routes)
                   if _call_of(r) is not None]
            if hot:
                raise FastPathRefused(
                    f"the fast path cannot serve routes {hot}: their router is included "
                    "with dependencies, a prefix or a body size limit")
        _check_inclusions(included.routes)


def _call_of(route: Any) -> Call | None:
    return CALL_OF.get(route.endpoint) if isinstance(route, APIRoute) else None


def _check_app(api: FastAPI) -> None:
    """What around the routes the fast path would skip: a middleware inside it, an
    exception handler for an error it answers itself, app-wide dependencies."""
    middleware: list[Middleware] = api.user_middleware
    innermost: Any = middleware[-1].cls if middleware else None
    if innermost is not FastPath:
        raise FastPathRefused("the fast path must be the app's innermost middleware")
    if api.router.dependencies:
        raise FastPathRefused("the app has dependencies of its own the fast path would skip")
    for kind, handler in api.exception_handlers.items():
        answered = isinstance(kind, type) and (
            issubclass(kind, ce.CoordinatorError) or issubclass(kind, POOL_TIMEOUTS))
        if answered and getattr(handler, "__module__", None) != service_errors.__name__:
            raise FastPathRefused(
                f"an exception handler for {kind.__name__} is not the app's own: the fast "
                "path answers that error itself")


def routes_of(api: FastAPI) -> tuple[Candidate, ...]:
    """FastAPI's route table as the fast path reads it; ``FastPathRefused`` if a hot route
    (or the app around it) has anything it cannot honour."""
    _check_app(api)
    _check_inclusions(api.routes)
    table = []
    for route in leaf_routes(api.routes):
        call = _call_of(route)
        hot = _hot(route, call) if isinstance(route, APIRoute) and call is not None else None
        plain = type(route) in (Route, APIRoute)
        table.append(Candidate(
            getattr(route, "path_regex", None) if plain else None,
            frozenset(getattr(route, "methods", None) or ()), route, hot))
    if not any(c.hot is not None for c in table):
        raise FastPathRefused("the app has no route the fast path serves")
    return tuple(table)


class FastPath:
    """The middleware: in front of FastAPI's routing, inside the limits."""

    def __init__(self, app: ASGIApp, api: FastAPI) -> None:
        self.app = app
        self.api = api
        self.table = routes_of(api)
        #: The table for each method, in the router's order: the routes that can match.
        self.by_method = {
            method: tuple(c for c in self.table if c.regex is None or method in c.methods)
            for method in {m for c in self.table for m in c.methods}}
        hot = [c.hot for c in self.table if c.hot is not None]
        self.dependencies = frozenset().union(*(h.dependencies for h in hot))
        #: Requests it served, and hot requests it left to FastAPI under overrides.
        self.served = 0
        self.stepped_aside = 0
        api.state.fast_path = self

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = self._match(scope) if scope["type"] == "http" else None
        if match is None or self._overridden():
            await self.app(scope, receive, send)
            return
        hot, path_params = match
        scope["route"] = hot.route  # the metrics' label, as FastAPI's router leaves it
        body = await _read_body(receive)
        if body is None:
            return  # the client left before sending its body: nothing to answer
        try:
            response = await self._serve(scope, body, hot, path_params)
        except Decline:
            await self.app(scope, _replay(body, receive), send)
            return
        self.served += 1
        await response(scope, receive, send)

    def _overridden(self) -> bool:
        overrides = self.api.dependency_overrides
        if not overrides or self.dependencies.isdisjoint(overrides):
            return False
        if not self.stepped_aside:
            log.warning("dependency overrides replace a hot route's dependency: the fast "
                        "path leaves those routes to FastAPI's handlers")
        self.stepped_aside += 1
        return True

    def _match(self, scope: Scope) -> tuple[HotRoute, dict[str, str]] | None:
        """The hot route FastAPI's router would pick for this request and its path
        parameters; None when it would pick another route (or none)."""
        root = scope.get("root_path", "")
        path: str = scope["path"]
        if root and path.startswith(root):
            path = path[len(root):]
        for candidate in self.by_method.get(scope["method"], ()):
            if candidate.regex is None:
                if candidate.route.matches(scope)[0] is Match.FULL:
                    return None
                continue
            found = candidate.regex.match(path)
            if found is None:
                continue
            if candidate.hot is None:
                return None
            convertors = candidate.hot.route.param_convertors
            return candidate.hot, {k: convertors[k].convert(v)
                                   for k, v in found.groupdict().items()}
        return None

    async def _serve(self, scope: Scope, body: bytes, hot: HotRoute,
                     path_params: Mapping[str, str]) -> Response:
        headers = _headers(scope)
        if IDEMPOTENCY_KEY in headers:
            raise Decline  # recorded with the change: FastAPI's handler does that
        values: dict[str, Any] = {}
        for param in hot.path_params:
            values[param.name] = param.value(path_params, values)
        if hot.query_params:
            # The last value of each, as Starlette's ``QueryParams`` (and so FastAPI) has it.
            query = dict(parse_qsl(scope["query_string"].decode("latin-1"),
                                   keep_blank_values=True))
            for param in hot.query_params:
                values[param.name] = param.value(query, values)
        for param in hot.header_params:
            values[param.name] = param.value(headers, values)
        app = self.api
        settings: ServiceSettings = app.state.settings
        authenticator: Authenticator = app.state.authenticator
        backend = Backend(app.state.coordinator, app.state.statements)
        ns: str = values[NS]
        try:
            model = _body(hot.body_field, headers.get("content-type"), body)
            who = await principal_of(bearer_of(headers.get("authorization")), settings,
                                     authenticator, scope.get(PRINCIPAL_SCOPE_KEY))
            who.require(ns, hot.scope)
            work = hot.call.prepare(
                backend, settings, ns, ref=_ref(hot, values), body=model,
                if_match=values.get("if_match"),
                query={n: values[n] for n in hot.call.query_names if n in values})
        except Exception as exc:  # every refusal is FastAPI's to give
            raise Decline from exc
        try:
            return await work()
        except ce.CoordinatorError as exc:
            return coordinator_response(exc, settings.retry_after_seconds)
        except POOL_TIMEOUTS as exc:
            return pool_timeout_response(exc, settings.retry_after_seconds)


def _headers(scope: Scope) -> dict[str, str]:
    """The first value of each header, by its lower-case name (as Starlette's
    ``Headers.get`` finds it)."""
    return {name.decode("latin-1"): value.decode("latin-1")
            for name, value in reversed(scope["headers"])}


def _ref(hot: HotRoute, values: Mapping[str, Any]) -> NodeRef | None:
    """The node of the URL, as ``deps.node_ref`` reads it."""
    if not hot.by_node:
        return None
    node_id = values.get(NODE_ID)
    if node_id is not None:
        return NodeRef(str(node_id), False)
    return NodeRef(values[PATH], True)


def _body(field: Any | None, content_type: str | None, body: bytes) -> Any:
    """The body as the route's field validates it, read as FastAPI reads a JSON body."""
    if field is None:
        return None
    media_type = (content_type or "").partition(";")[0].strip().lower()
    if not body or media_type != "application/json":
        raise Decline
    value, errors = field.validate(json.loads(body), {}, loc=("body",))
    if errors:
        raise Decline
    return value


async def _read_body(receive: Receive) -> bytes | None:
    """The request's body; None if the client disconnected first."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` for the next app: the body already read, then whatever follows."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again

