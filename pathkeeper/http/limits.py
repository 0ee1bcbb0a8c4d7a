"""Request limits enforced before a request reaches a handler: body size and in-flight count.

Both are plain ASGI middleware so a refused request costs no thread and no
database connection. Path length and depth are checked by the coordinator (422),
page sizes by the query parameter schemas.

In-flight requests are counted in two pools, each with a total cap and a cap per
caller (an API key; without one, the client address): short requests, and long polls
(the change feed with ``wait``, ``/v1/indexed``, search with ``min_seq``), which hold
their slot for up to the wait while doing nothing. One caller can then fill neither
pool, and idle long polls never take the slots that short requests need.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator import paths
from coordinator.errors import InvalidPath

#: Never refused by the in-flight cap: an overloaded server must still answer probes.
UNLIMITED_PATHS = ("/healthz", "/readyz")


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


def caller_of(scope: Scope) -> str:
    """Who the request counts against: its bearer credentials (hashed, never kept), or
    the client address for a request without any."""
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            parts = value.split(None, 1)
            secret = parts[-1].strip() if parts else b""
            return "key:" + hashlib.sha256(secret).hexdigest()
    client = scope.get("client")
    return f"addr:{client[0] if client else '-'}"


@dataclass
class Pool:
    """Slots in flight: at most ``total`` in all and ``per_caller`` for one caller."""

    total: int
    per_caller: int
    used: int = 0
    by_caller: dict[str, int] = field(default_factory=dict)

    def refusal(self, caller: str) -> str | None:
        """Why a new request of ``caller`` cannot have a slot now, or None."""
        if self.used >= self.total:
            return "too many requests in flight; retry later"
        if self.by_caller.get(caller, 0) >= self.per_caller:
            return (f"this API key already has {self.per_caller} requests of this kind in "
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
    or encoded slashes (400), bodies over ``max_body_bytes`` (413) and requests beyond
    the in-flight caps of their pool, in all or for their caller (429 with Retry-After)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, max_inflight: int,
                 retry_after: int, max_inflight_per_key: int | None = None,
                 max_long_polls: int = 0, max_long_polls_per_key: int = 0) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.retry_after = retry_after
        # The ASGI app runs on one event loop: the counters need no lock.
        self.short = Pool(max_inflight, max_inflight if max_inflight_per_key is None
                          else max_inflight_per_key)
        self.long = Pool(max_long_polls, max_long_polls_per_key)

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
        pool = self.long if is_long_poll(path, scope.get("query_string", b"")) else self.short
        caller = caller_of(scope)
        refusal = pool.refusal(caller)
        if refusal is not None:
            await _error(send, 429, "overloaded", refusal,
                         [(b"retry-after", str(self.retry_after).encode())])
            return
        pool.take(caller)
        try:
            await self._with_body_cap(scope, receive, send)
        finally:
            pool.give_back(caller)

    async def _with_body_cap(self, scope: Scope, receive: Receive, send: Send) -> None:
        if STREAMED_PATH.fullmatch(scope.get("path", "")):
            await self.app(scope, receive, send)
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
        # grows past the cap is refused before the handler starts.
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message]), send)
                return
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _error(send, 413, "too_large",
                             f"request body is larger than {self.max_body_bytes} bytes")
                return
            chunks.append(chunk)
            more = bool(message.get("more_body", False))
        first: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay([first], receive), send)


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


