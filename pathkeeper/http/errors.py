"""The HTTP edge of the error hierarchy: one JSON shape, one status per error class.

Every error answer is ``{"error": {"code": ..., "message": ...}}`` (plus ``index``
for the failing operation of a batch). ``code`` is the coordinator error's stable
``.code`` or one of the service's own codes below.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout as AsyncPoolTimeout
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from coordinator import errors as ce
from coordinator.tree import metadata_too_deep

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


def status_of(exc: ce.CoordinatorError) -> int:
    for cls, status in STATUS:
        if isinstance(exc, cls):
            return status
    return 500


def body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


def coordinator_response(
    exc: ce.CoordinatorError, retry_after: int, **extra: Any
) -> JSONResponse:
    status = status_of(exc)
    headers = {"Retry-After": str(retry_after)} if status in (429, 503) else None
    if exc.index is not None:  # the failing operation of a batch
        extra = {**extra, "index": exc.index}
    if exc.lines:  # a refused import: its bad lines, by number
        extra = {**extra, "lines": [{"line": n, "message": m} for n, m in exc.lines]}
    return JSONResponse(body(exc.code, str(exc), **extra), status, headers=headers)


#: No pooled connection in time: the coordinator's pool, or the lane's asyncio one.
POOL_TIMEOUTS = (PoolTimeout, AsyncPoolTimeout)


def pool_timeout_response(exc: Exception, retry_after: int) -> JSONResponse:
    """No database connection came free in time: the service is overloaded, retry."""
    return JSONResponse(
        body("unavailable", f"no database connection available in time: {exc}"),
        503,
        headers={"Retry-After": str(retry_after)},
    )


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
    return None


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
        # Starlette logs the traceback; the client still gets the one error shape.
        return JSONResponse(body("internal", "internal server error"), 500)

    app.add_exception_handler(ce.CoordinatorError, on_coordinator)
    app.add_exception_handler(Exception, on_unexpected)
    app.add_exception_handler(ServiceError, on_service)
    for timeout in POOL_TIMEOUTS:
        app.add_exception_handler(timeout, on_pool_timeout)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
