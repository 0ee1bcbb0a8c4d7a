"""Request limits enforced before a request reaches a handler: body size and in-flight count.

Both are plain ASGI middleware so a refused request costs no thread and no
database connection. Path length and depth are checked by the coordinator (422),
page sizes by the query parameter schemas.
"""

from __future__ import annotations

import json
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import paths
from ..errors import InvalidPath

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


class LimitsMiddleware:
    """Refuse query strings and paths that are not UTF-8 (422), paths with dot-segments
    or encoded slashes (400), bodies over
    ``max_body_bytes`` (413) and requests beyond ``max_inflight`` concurrent ones (429
    with Retry-After)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, max_inflight: int,
                 retry_after: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_inflight = max_inflight
        self.retry_after = retry_after
        self.inflight = 0

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
        limited = scope.get("path", "") not in UNLIMITED_PATHS
        if limited and self.inflight >= self.max_inflight:
            await _error(send, 429, "overloaded", "too many requests in flight; retry later",
                         [(b"retry-after", str(self.retry_after).encode())])
            return
        if limited:
            self.inflight += 1
        try:
            await self._with_body_cap(scope, receive, send)
        finally:
            if limited:
                self.inflight -= 1

    async def _with_body_cap(self, scope: Scope, receive: Receive, send: Send) -> None:
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


