"""Request limits enforced before a request reaches a handler: who is calling, body
size and time, and in-flight count.

A plain ASGI middleware, so a refused request costs no thread and no database
connection. Path length and depth are checked by the coordinator (422), page sizes by
the query parameter schemas.

In-flight requests are counted in pools, each with a total cap and a cap per caller:
short requests and long polls (the change feed with ``wait``, ``/v1/indexed``, search
with ``min_seq``, which hold their slot for up to the wait while doing nothing), per
API key; and requests without a key to hold, per client address. One caller can then
fill no pool, idle long polls never take the slots that short requests need, and a
request takes a key's slot only once its key is authenticated: made-up credentials
are refused before they hold anything. A body must arrive within
``body_timeout_seconds``, so a client that stops sending gives its slot back.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator import paths
from coordinator.errors import InvalidPath
from pathkeeper.http.auth import PRINCIPAL_SCOPE_KEY, Authenticator, bearer_of
from pathkeeper.http.errors import known_error_response
from pathkeeper.http.metrics import ServiceMetrics
from pathkeeper.http.settings import ServiceSettings

#: Never refused by the in-flight cap: an overloaded server must still answer probes.
UNLIMITED_PATHS = ("/healthz", "/readyz", "/metrics")
#: Every URL under it needs an API key (with auth on).
API_PREFIX = "/v1/"


async def _error(send: Send, status: int, code: str, message: str,
                 headers: list[tuple[bytes, bytes]] | None = None) -> None:
    payload = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            *(headers or []),
        ],
    })
    await send({"type": "http.response.body", "body": payload})


def _percent_decoded_utf8(raw: bytes) -> bool:
    """Whether every percent-decoded part of a query string or path is valid UTF-8.

    Starlette decodes with errors="replace": without this check ``path=/d/%FF`` would
    silently name the node ``/d/\ufffd`` and a DELETE would act on it."""
    try:
        for part in raw.replace(b"+", b" ").split(b"&"):
            unquote_to_bytes(part).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _segments_route_as_sent(raw_path: bytes) -> bool:
    """Whether every segment of the path routes as the segment it is.

    A ``.`` or ``..`` segment (also percent-encoded: ``%2E%2E``) means another URL to
    any normalising hop (a client library, a proxy): ``/nodes/..`` is
    ``/v1/namespaces/{ns}``. An encoded ``/`` (``%2F``) is decoded by the router into a
    second segment, so ``/nodes/x%2Fchildren`` would reach the children route. Names
    and node ids contain neither, so such a request is refused before any routing."""
    for segment in raw_path.split(b"/"):
        decoded = unquote_to_bytes(segment)
        if decoded in (b".", b"..") or b"/" in decoded:
            return False
    return True


#: Routes that read their body as a stream (an import of any size, bounded in memory by
#: the importer): not buffered here and not capped by ``max_body_bytes``.
STREAMED_PATH = re.compile(r"/v1/namespaces/[^/]+/import")

LONG_POLL_PATH = re.compile(r"/v1/namespaces/[^/]+/(events|search)|/v1/indexed")


def is_long_poll(path: str, query_string: bytes) -> bool:
    """Whether the request may wait (change feed ``wait`` > 0, ``/v1/indexed`` with a
    timeout, search with ``min_seq``). A malformed value counts as short: the schema
    refuses it at once."""
    match = LONG_POLL_PATH.fullmatch(path)
    if match is None:
        return False
    query = parse_qs(query_string.decode("latin-1"))
    if match.group(1) == "search":
        return "min_seq" in query
    name = "wait" if match.group(1) == "events" else "timeout"
    if name not in query:
        return name == "timeout"  # /v1/indexed waits 10 s by default
    try:
        return float(query[name][-1]) > 0
    except ValueError:
        return False


def _address(scope: Scope) -> str:
    client = scope.get("client")
    return f"addr:{client[0] if client else '-'}"


def _authorization(scope: Scope) -> str | None:
    """The first ``Authorization`` header, as Starlette's ``Headers.get`` reads it."""
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            text: str = value.decode("latin-1")
            return text
    return None


@dataclass
class Pool:
    """Slots in flight: at most ``total`` in all and ``per_caller`` for one caller."""

    total: int
    per_caller: int
    #: Its label in the metrics (``metrics.POOLS``).
    name: str = ""
    used: int = 0
    by_caller: dict[str, int] = field(default_factory=dict)

    def refusal(self, caller: str) -> str | None:
        """Why a new request of ``caller`` cannot have a slot now, or None."""
        if self.used >= self.total:
            return "too many requests in flight; retry later"
        if self.by_caller.get(caller, 0) >= self.per_caller:
            who = "API key" if caller.startswith("key:") else "client address"
            return (f"this {who} already has {self.per_caller} requests of this kind in "
                    "flight; retry later")
        return None

    def take(self, caller: str) -> None:
        self.used += 1
        self.by_caller[caller] = self.by_caller.get(caller, 0) + 1

    def give_back(self, caller: str) -> None:
        self.used -= 1
        left = self.by_caller[caller] - 1
        if left:
            self.by_caller[caller] = left
        else:
            del self.by_caller[caller]  # the map holds only callers with requests


class LimitsMiddleware:
    """Refuse query strings and paths that are not UTF-8 (422), paths with dot-segments
    or encoded slashes (400), ``/v1`` requests without a valid API key (401, before
    they hold anything), bodies over ``max_body_bytes`` (413) or slower than
    ``body_timeout_seconds`` (408), and requests beyond the in-flight caps of their
    pool, in all or for their caller (429 with Retry-After).

    A caller is an API key (its id, once authenticated), or the client address for
    requests without one to hold: every request with auth off, and with auth on the
    URLs outside ``/v1`` (the API docs), which count in a small pool of their own."""

    def __init__(self, app: ASGIApp, settings: ServiceSettings,
                 authenticator: Authenticator, metrics: ServiceMetrics) -> None:
        self.app = app
        self.auth = settings.auth
        self.authenticator = authenticator
        self.max_body_bytes = settings.max_body_bytes
        self.body_timeout = settings.body_timeout_seconds
        self.retry_after = settings.retry_after_seconds
        # The ASGI app runs on one event loop: the counters need no lock.
        self.short = Pool(settings.max_inflight, settings.max_inflight_per_key, "short")
        self.long = Pool(settings.max_long_polls, settings.max_long_polls_per_key, "long_poll")
        self.anonymous = Pool(settings.max_anonymous, settings.max_anonymous_per_address,
                              "anonymous")
        for pool in (self.short, self.long, self.anonymous):
            metrics.watch(pool.name, pool)
        self.overloaded = metrics.overloaded

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not (
            _percent_decoded_utf8(scope.get("query_string", b""))
            and _percent_decoded_utf8(scope.get("raw_path") or b"")
        ):
            await _error(send, 422, "invalid_request", "the URL is not valid UTF-8")
            return
        raw_path = scope.get("raw_path") or scope.get("path", "").encode("utf-8")
        if not _segments_route_as_sent(raw_path):
            await _error(send, 400, "invalid_request",
                         "the URL path has a '.' or '..' segment or an encoded '/'; "
                         "namespaces and node ids never do")
            return
        path = scope.get("path", "")
        if path in UNLIMITED_PATHS:
            await self._with_body_cap(scope, receive, send)
            return
        try:
            pool, caller = await self._pool_and_caller(scope, path)
        except Exception as exc:
            response = known_error_response(exc, self.retry_after)
            if response is None:
                raise
            await response(scope, receive, send)
            return
        refusal = pool.refusal(caller)
        if refusal is not None:
            self.overloaded.labels(pool.name).inc()
            await _error(send, 429, "overloaded", refusal,
                         [(b"retry-after", str(self.retry_after).encode())])
            return
        pool.take(caller)
        try:
            await self._with_body_cap(scope, receive, send)
        finally:
            pool.give_back(caller)

    async def _pool_and_caller(self, scope: Scope, path: str) -> tuple[Pool, str]:
        """The pool the request counts in and the caller it counts against. Under
        ``/v1`` with auth on, the key is authenticated first (a lookup waits for none
        of the pools' slots) and its principal left in the scope for the routes."""
        if not self.auth:
            return self._pool_of(scope, path), _address(scope)
        if not path.startswith(API_PREFIX):
            return self.anonymous, _address(scope)
        principal = await self.authenticator.principal(bearer_of(_authorization(scope)))
        scope[PRINCIPAL_SCOPE_KEY] = principal
        return self._pool_of(scope, path), f"key:{principal.key_id}"

    def _pool_of(self, scope: Scope, path: str) -> Pool:
        return self.long if is_long_poll(path, scope.get("query_string", b"")) else self.short

    async def _with_body_cap(self, scope: Scope, receive: Receive, send: Send) -> None:
        if STREAMED_PATH.fullmatch(scope.get("path", "")):
            await self._streamed(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_body_bytes or declared < 0:
                    await _error(send, 413, "too_large",
                                 f"request body is larger than {self.max_body_bytes} bytes")
                    return
        # Read the whole body here (it is small by definition) so a chunked body that
        # grows past the cap is refused before the handler starts, and one that stops
        # arriving is cut off before the handler holds anything more than the slot.
        chunks: list[bytes] = []
        size = 0
        more = True
        try:
            async with asyncio.timeout(self.body_timeout):
                while more:
                    message = await receive()
                    if message["type"] != "http.request":
                        break
                    chunk: bytes = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_body_bytes:
                        await _error(send, 413, "too_large",
                                     f"request body is larger than {self.max_body_bytes} "
                                     "bytes")
                        return
                    chunks.append(chunk)
                    more = bool(message.get("more_body", False))
        except TimeoutError:
            await self._body_timed_out(send)
            return
        if more:  # the client left: the app sees its disconnect
            await self.app(scope, _replay([message]), send)
            return
        first: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay([first], receive), send)

    async def _streamed(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run a streamed route with ``body_timeout_seconds`` between two chunks of its
        body: past it the route sees the client gone (an import then keeps nothing)
        and the client gets 408, if nothing was answered yet."""
        state = {"timed_out": False, "answered": False}

        async def timed_receive() -> Message:
            if state["timed_out"]:
                return {"type": "http.disconnect"}
            try:
                async with asyncio.timeout(self.body_timeout):
                    return await receive()
            except TimeoutError:
                state["timed_out"] = True
                return {"type": "http.disconnect"}

        async def guarded_send(message: Message) -> None:
            if state["timed_out"] and not state["answered"]:
                return  # the route's answer to a gone client; the 408 goes instead
            state["answered"] = True
            await send(message)

        try:
            await self.app(scope, timed_receive, guarded_send)
        except Exception:
            if not state["timed_out"]:
                raise
        if state["timed_out"] and not state["answered"]:
            await self._body_timed_out(send)

    async def _body_timed_out(self, send: Send) -> None:
        await _error(send, 408, "request_timeout",
                     f"the request body did not arrive within {self.body_timeout:g} s",
                     [(b"connection", b"close")])


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    pending = list(messages)

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive


def check_path(value: str, max_bytes: int) -> str:
    """The service's own (possibly stricter) path length cap; the coordinator checks the rest."""
    if len(value.encode("utf-8", "surrogatepass")) > min(max_bytes, paths.MAX_PATH_BYTES):
        raise InvalidPath(f"path is longer than {max_bytes} bytes")
    return value


