"""The hot routes' common case (a command, a node's read), served without FastAPI's
request machinery.

A rename over HTTP spent about 0.9 ms of server CPU per request on this project's
2-vCPU machines (``bench/bench_http.py``, 2 workers), of which the coordinator's own
part is about 0.2 ms: the rest was routing, dependency solving and parameter
validation, paid for every request. This ASGI middleware, inside the app's limits,
recognises a hot request by its URL, parses its few parts itself and runs the route's
call (``calls``: the same one the FastAPI handler runs).

It answers only a request whose every part FastAPI would accept as it is: a command or
a node's read, by path or by id; namespace, path, node id and ``If-Match`` within the
schema's limits; query fields and an ``application/json`` body that the route's models
accept; an API key with the route's scope on the namespace; no ``Idempotency-Key``; no
dependency overrides. Everything else, including every refusal
before the work runs, goes on to FastAPI untouched (the body replayed), so FastAPI stays
the definition of what a request means and of each error it gets. What the lane answers
itself is the work's outcome: its result, or its coordinator error in the one JSON shape
(``errors``).
"""

from __future__ import annotations

import json
from typing import Any, get_args
from urllib.parse import parse_qsl

from pydantic import BaseModel, ValidationError
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator import errors as ce
from pathkeeper.http.auth import PRINCIPAL_SCOPE_KEY, Authenticator, bearer_of
from pathkeeper.http.calls import CALLS, STAT, Backend, CommandCall, StatCall
from pathkeeper.http.deps import (
    IfMatchHeader,
    NodeIdParam,
    NodeRef,
    NsParam,
    PathQuery,
    principal_of,
)
from pathkeeper.http.errors import POOL_TIMEOUTS, coordinator_response, pool_timeout_response
from pathkeeper.http.metrics import ROUTE_KEY
from pathkeeper.http.operations import NAMESPACE_URL, NODE_BY_ID, NODE_BY_PATH
from pathkeeper.http.settings import ServiceSettings


def _length_bounds(param: Any) -> tuple[int, int]:
    """The (min, max) length a FastAPI parameter declaration allows."""
    low, high = 0, 1 << 62
    for meta in get_args(param)[1].metadata:
        low = getattr(meta, "min_length", None) or low
        high = getattr(meta, "max_length", None) or high
    return low, high


NS_LENGTH = _length_bounds(NsParam)
PATH_LENGTH = _length_bounds(PathQuery)
NODE_ID_LENGTH = _length_bounds(NodeIdParam)
IF_MATCH_LENGTH = _length_bounds(IfMatchHeader)

PREFIX = NAMESPACE_URL.removesuffix("{ns}")
#: The first segment of a node's URL by id ("nodes").
NODES = NODE_BY_ID.split("/")[1]


class Decline(Exception):
    """The lane does not answer this request: FastAPI will."""


Call = CommandCall | StatCall


class Lane:
    """The middleware: in front of ``app`` (FastAPI's routing), inside the limits."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # The URL after ``/v1/namespaces/{ns}/``: "node/rename", "dirs", ...; by id, the
        # part after the id with its slash ("/rename", or "" for the node itself).
        self._by_path: dict[tuple[str, str], Call] = {}
        self._by_id: dict[tuple[str, str], Call] = {}
        self._plain: dict[tuple[str, str], Call] = {}
        #: The route template of each call, by path (or plain) and by id: its metrics label.
        self._templates: dict[tuple[Call, bool], str] = {}
        for route, call in CALLS.items():
            self._add(route.method, route.suffix, call)
        self._add("GET", "", STAT)

    def _add(self, method: str, suffix: str, call: Call) -> None:
        if call.by_node:
            self._by_path[method, f"{NODE_BY_PATH}{suffix}"[1:]] = call
            self._by_id[method, suffix] = call
            self._templates[call, False] = f"{NAMESPACE_URL}{NODE_BY_PATH}{suffix}"
            self._templates[call, True] = f"{NAMESPACE_URL}{NODE_BY_ID}{suffix}"
        else:
            self._plain[method, suffix[1:]] = call
            self._templates[call, False] = f"{NAMESPACE_URL}{suffix}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        match = self._match(scope)
        if match is None or scope["app"].dependency_overrides:
            await self.app(scope, receive, send)
            return
        scope[ROUTE_KEY] = self._templates[match[1], match[2] is not None]
        body = await _read_body(receive)
        if body is None:
            return  # the client left before sending its body: nothing to answer
        try:
            response = await self._serve(scope, body, *match)
        except Decline:
            await self.app(scope, _replay(body, receive), send)
            return
        await response(scope, receive, send)

    def _match(self, scope: Scope) -> tuple[str, Call, str | None] | None:
        """(namespace, call, node id) of a URL the lane serves; None for any other URL."""
        ns, _, tail = scope["path"][len(PREFIX):].partition("/")
        method = scope["method"]
        call = self._plain.get((method, tail)) or self._by_path.get((method, tail))
        if call is not None:
            return ns, call, None
        head, _, rest = tail.partition("/")
        node_id, slash, suffix = rest.partition("/")
        # The slash kept: ``nodes/{id}/`` is not the node's URL (FastAPI redirects it).
        call = self._by_id.get((method, slash + suffix)) if head == NODES else None
        return None if call is None else (ns, call, node_id)

    async def _serve(self, scope: Scope, body: bytes, ns: str, call: Call,
                     node_id: str | None) -> Response:
        _within(ns, NS_LENGTH)
        app = scope["app"]
        settings: ServiceSettings = app.state.settings
        headers = _headers(scope)
        if b"idempotency-key" in headers:
            raise Decline  # recorded with the change: FastAPI's handler does that
        # The last value of each parameter, as Starlette's QueryParams.get gives it.
        query = dict(parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True))
        ref = self._ref(call, query, node_id)
        if_match = headers.get(b"if-match") if call.takes_if_match else None
        if if_match is not None:
            _within(if_match, IF_MATCH_LENGTH)
        authenticator: Authenticator = app.state.authenticator
        bearer = bearer_of(headers.get(b"authorization"))
        backend = Backend(app.state.coordinator, app.state.statements)
        try:
            who = await principal_of(bearer, settings, authenticator,
                                     scope.get(PRINCIPAL_SCOPE_KEY))
            who.require(ns, call.scope)
            model = _body(call.body_model, headers.get(b"content-type"), body)
            work = call.prepare(backend, settings, ns, ref=ref, body=model, if_match=if_match,
                                query=query)
        except Exception as exc:  # every refusal is FastAPI's to give
            raise Decline from exc
        try:
            return await work()
        except ce.CoordinatorError as exc:
            return coordinator_response(exc, settings.retry_after_seconds)
        except POOL_TIMEOUTS as exc:
            return pool_timeout_response(exc, settings.retry_after_seconds)

    @staticmethod
    def _ref(call: Call, query: dict[str, str], node_id: str | None) -> NodeRef | None:
        if not call.by_node:
            return None
        if node_id is not None:
            return NodeRef(_within(node_id, NODE_ID_LENGTH), False)
        path = query.get("path")
        if path is None:
            raise Decline
        return NodeRef(_within(path, PATH_LENGTH), True)


def _within(value: str, bounds: tuple[int, int]) -> str:
    if not bounds[0] <= len(value) <= bounds[1]:
        raise Decline
    return value


#: The headers the lane reads.
READ_HEADERS = frozenset((b"authorization", b"content-type", b"idempotency-key", b"if-match"))


def _headers(scope: Scope) -> dict[bytes, str]:
    """The first value of each header in ``READ_HEADERS`` (as Starlette's ``Headers.get``)."""
    found: dict[bytes, str] = {}
    for name, value in scope["headers"]:
        if name in READ_HEADERS and name not in found:
            found[name] = value.decode("latin-1")
    return found


def _body(model: type[BaseModel] | None, content_type: str | None, body: bytes
          ) -> BaseModel | None:
    """The body as the route's model, read as FastAPI reads a JSON body."""
    if model is None:
        return None
    media_type = (content_type or "").partition(";")[0].strip().lower()
    if not body or media_type != "application/json":
        raise Decline
    try:
        return model.model_validate(json.loads(body))
    except (ValueError, ValidationError) as exc:
        raise Decline from exc


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
