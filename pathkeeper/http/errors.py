"""The HTTP edge of the error hierarchy: one JSON shape, one status per error class.

Every error answer is ``{"error": {"code": ..., "message": ...}}`` (plus ``index``
for the failing operation of a batch). ``code`` is the coordinator error's stable
``.code`` or one of the service's own codes below.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import psycopg
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout as AsyncPoolTimeout
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from coordinator import errors as ce
from coordinator.content import metadata_too_deep
from coordinator.db import translate
from indexer.search_engine import SearchRefused, SearchUnavailable

log = logging.getLogger("pathkeeper.service")

#: Checked in order: subclasses before their bases.
STATUS: list[tuple[type[ce.CoordinatorError], int]] = [
    (ce.NotFound, 404),
    (ce.AlreadyExists, 409),
    (ce.DirectoryNotEmpty, 409),
    # The request is not the one the key was first used for: the caller's mistake.
    (ce.IdempotencyKeyReused, 422),
    (ce.Conflict, 409),
    # The tree's current state does not allow the operation, like AlreadyExists.
    (ce.NotADirectory, 409),
    (ce.IsADirectory, 409),
    (ce.InvalidName, 422),  # also InvalidPath, InvalidContent
    (ce.InvalidMove, 400),
    # A request the tree can never satisfy as asked (metadata of the root).
    (ce.InvalidArgument, 422),
    (ce.TooLarge, 413),
    (ce.Unavailable, 503),
    # The change feed's cursor is below the compaction horizon: those events are gone.
    (ce.CursorExpired, 410),
    # Past the end of the log: not this log's cursor (or the log was restored to an
    # earlier state); refused rather than echoed, which would skip what comes below it.
    (ce.CursorAhead, 409),
]


class ServiceError(Exception):
    """An error raised by the HTTP layer itself (auth, limits, malformed requests)."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def unauthorized(message: str = "missing or invalid API key") -> ServiceError:
    return ServiceError(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})


def forbidden(message: str) -> ServiceError:
    return ServiceError(403, "forbidden", message)


def hidden_namespace(ns: str) -> ce.NotFound:
    """What a key gets for a namespace it may not use: the same answer as a missing one."""
    return ce.NotFound(f"no namespace {ns!r}")


#: A failed If-Match (or ``if_version``): HTTP's own status for it, not 409.
PRECONDITION_FAILED = "precondition_failed"


def status_of(exc: ce.CoordinatorError) -> int:
    if ce.is_version_mismatch(exc):
        return 412
    for cls, status in STATUS:
        if isinstance(exc, cls):
            return status
    return 500


#: What a caller is told when a server does not answer: never the driver's or the search
#: client's text, which names hosts, ports and SQL.
DATABASE_DOWN = "the database is unavailable; retry later"
DATABASE_NOT_READY = "the database schema does not match this service; retry later"
STATEMENT_TIMED_OUT = "a database statement timed out; retry later"
SEARCH_DOWN = "the search server is unavailable; retry later"
INTERNAL = "internal server error"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def outage_message(exc: BaseException) -> str | None:
    """The public message for an error of a server that does not answer (the database,
    the search server); None for anything else (a refusal, a bug)."""
    if isinstance(exc, ce.NotMigrated):
        return DATABASE_NOT_READY
    for link in _chain(exc):
        if isinstance(link, DBAPIError):
            return _database_message(translate(link))
        if isinstance(link, psycopg.errors.QueryCanceled):
            return STATEMENT_TIMED_OUT
        if isinstance(link, psycopg.OperationalError):
            return DATABASE_DOWN
        if isinstance(link, psycopg.Error):
            return None
        if isinstance(link, SearchUnavailable) or (
            isinstance(link, SearchRefused) and link.status >= 500
        ):
            return SEARCH_DOWN
    return None


def _database_message(typed: ce.CoordinatorError) -> str | None:
    if not isinstance(typed, ce.Unavailable):
        return None  # the database answered: a refusal, or a bug of ours
    if str(typed).startswith("statement timed out"):
        return STATEMENT_TIMED_OUT
    return DATABASE_DOWN


def _public_message(exc: ce.CoordinatorError, status: int) -> str:
    """What the caller may read of ``exc``: its own words for the tree's refusals,
    a fixed line for a server not answering and for a bug."""
    if status in (500, 503):
        message = outage_message(exc)
        if message is not None:
            return message
        if status == 500:
            return INTERNAL
    return str(exc)


def body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


#: Retry-After of a namespace frozen for a move (docs/sharding.md): the freeze is meant to
#: last under a second, so a client retries after one, whatever the outage setting says.
FROZEN_RETRY_AFTER = 1


def coordinator_response(
    exc: ce.CoordinatorError, retry_after: int, **extra: Any
) -> JSONResponse:
    status = status_of(exc)
    if isinstance(exc, ce.NamespaceFrozen):
        retry_after = FROZEN_RETRY_AFTER
    headers = {"Retry-After": str(retry_after)} if status in (429, 503) else None
    message = _public_message(exc, status)
    if message != str(exc):
        log.warning("answered %d: %s: %s", status, type(exc).__name__, exc)
    code = {500: "internal", 412: PRECONDITION_FAILED}.get(status, exc.code)
    if exc.index is not None:  # the failing operation of a batch
        extra = {**extra, "index": exc.index}
    if exc.lines:  # a refused import: its bad lines, by number
        extra = {**extra, "lines": [{"line": n, "message": m} for n, m in exc.lines]}
    return JSONResponse(body(code, message, **extra), status, headers=headers)


#: No pooled connection in time: the coordinator's pool, or the fast path's asyncio one.
POOL_TIMEOUTS = (PoolTimeout, AsyncPoolTimeout)


def pool_timeout_response(exc: Exception, retry_after: int) -> JSONResponse:
    """No database connection came free in time: the service is overloaded, retry."""
    log.warning("no database connection in time: %s", exc)
    return JSONResponse(
        body("unavailable", "no database connection available in time; retry later"),
        503,
        headers={"Retry-After": str(retry_after)},
    )


def outage_response(exc: BaseException, retry_after: int) -> JSONResponse | None:
    """503 for an error of a server that does not answer (or of its driver), in the
    one error shape and without the driver's text; None for anything else."""
    message = outage_message(exc)
    if message is None:
        return None
    log.warning("answered 503: %s: %s", type(exc).__name__, exc)
    return JSONResponse(body("unavailable", message), 503,
                        headers={"Retry-After": str(retry_after)})


def service_response(exc: ServiceError, retry_after: int) -> JSONResponse:
    headers = dict(exc.headers)
    if exc.status in (429, 503):
        headers.setdefault("Retry-After", str(retry_after))
    return JSONResponse(body(exc.code, exc.message), exc.status, headers=headers or None)


def known_error_response(exc: Exception, retry_after: int) -> JSONResponse | None:
    """The answer to a refusal raised before any handler ran (by the limits): the
    service's, the coordinator's, a pool timeout's; None for anything else."""
    if isinstance(exc, ServiceError):
        return service_response(exc, retry_after)
    if isinstance(exc, ce.CoordinatorError):
        return coordinator_response(exc, retry_after)
    if isinstance(exc, POOL_TIMEOUTS):
        return pool_timeout_response(exc, retry_after)
    return outage_response(exc, retry_after)


def install(app: Any, retry_after: int) -> None:
    """Register the exception handlers that give every error the one JSON shape."""

    async def on_coordinator(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ce.CoordinatorError)
        return coordinator_response(exc, retry_after)

    async def on_service(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ServiceError)
        return service_response(exc, retry_after)

    async def on_pool_timeout(_: Request, exc: Exception) -> JSONResponse:
        return pool_timeout_response(exc, retry_after)

    async def on_validation(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        parts = []
        for err in exc.errors()[:5]:
            where = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
        return JSONResponse(body("invalid_request", "; ".join(parts) or "invalid request"), 422)

    async def on_http(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if isinstance(exc.__cause__, RecursionError):
            # A JSON body nested past what the parser can take: past the metadata's
            # limit too, so the answer a create or an import line gets for that.
            return coordinator_response(metadata_too_deep("JSON"), retry_after)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(
            body(code, str(exc.detail)), exc.status_code, headers=getattr(exc, "headers", None)
        )

    async def on_unexpected(_: Request, exc: Exception) -> JSONResponse:
        # A server that stopped answering under a handler: 503, retry.
        outage = outage_response(exc, retry_after)
        if outage is not None:
            return outage
        # Starlette logs the traceback; the client still gets the one error shape.
        return JSONResponse(body("internal", INTERNAL), 500)

    app.add_exception_handler(ce.CoordinatorError, on_coordinator)
    app.add_exception_handler(Exception, on_unexpected)
    app.add_exception_handler(ServiceError, on_service)
    for timeout in POOL_TIMEOUTS:
        app.add_exception_handler(timeout, on_pool_timeout)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
