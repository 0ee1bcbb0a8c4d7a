"""The error answers each route documents in the OpenAPI document: those it can give,
each with an example of the one error shape (``errors``)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from pathkeeper.http.operations import COMMAND_ROUTES
from pathkeeper.http.route_table import leaf_routes
from pathkeeper.http.schemas import ErrorOut

#: Status: (when, an example code, its message).
ERRORS: dict[int, tuple[str, str, str]] = {
    400: ("A URL with a '.' or '..' segment or an encoded '/'; a move or a copy into its "
          "own subtree, or deeper than the depth limit",
          "invalid_move", "cannot move /a into its own subtree /a/b"),
    401: ("No API key, or not a valid one", "unauthorized", "missing or invalid API key"),
    403: ("The key's scope does not allow this", "forbidden",
          "this key has scope read; the request needs write"),
    404: ("No such namespace or node (or one the key does not cover)", "not_found",
          "no node /a/b in namespace docs"),
    408: ("The request body did not arrive in time", "request_timeout",
          "the request body did not arrive within 30 s"),
    409: ("The tree's state does not allow it: exists, not empty, not a directory, a lock "
          "wait that timed out", "already_exists", "/a/b already exists"),
    410: ("The cursor is below the compaction horizon: those events are gone",
          "cursor_expired", "cursor 10 is below the compaction horizon 500"),
    412: ("If-Match: the node's version is not the one given", "precondition_failed",
          "version is 7, expected 5"),
    413: ("The body, a file's content, an import line or a copy (in nodes) is larger than "
          "allowed",
          "too_large", "request body is larger than 8388608 bytes"),
    422: ("A field, name or path the schema or the tree refuses", "invalid_request",
          "body.name: String should have at most 255 characters"),
    429: ("Too many requests in flight (in all or for this key): retry after Retry-After",
          "overloaded", "too many requests in flight; retry later"),
    503: ("PostgreSQL or the search server does not answer, a statement timed out, or the "
          "namespace is being moved to another database server: retry after Retry-After",
          "unavailable", "the database is unavailable; retry later"),
}
#: The change feed's own meaning of 409.
CURSOR_AHEAD = ("The cursor is past the end of this log", "cursor_ahead",
                "cursor 900 is past the end of the log (800)")

#: Every route under /v1: the key, the limits, validation, the database.
API_ERRORS = (400, 401, 403, 404, 422, 429, 503)
EVENTS_URL_SUFFIX = "/events"
NODE_COMMANDS = {name for r in COMMAND_ROUTES if r.by_node
                 for name in (r.name, f"{r.name}_by_id")}


def codes_of(route: APIRoute) -> list[int]:
    """The error statuses ``route`` can answer."""
    if not route.path.startswith("/v1/"):
        return []
    codes = set(API_ERRORS)
    reads_body = route.body_field is not None or route.name == "import_nodes"
    if reads_body:
        codes |= {408, 413}
    if not (route.methods or set()) <= {"GET", "HEAD"}:
        codes.add(409)
    if route.name in NODE_COMMANDS or route.name == "batch":
        codes.add(412)
    if route.path.endswith(EVENTS_URL_SUFFIX):
        codes |= {409, 410}
    return sorted(codes)


def response_of(route: APIRoute, status: int) -> dict[str, Any]:
    when, code, message = ERRORS[status]
    if status == 409 and route.path.endswith(EVENTS_URL_SUFFIX):
        when, code, message = CURSOR_AHEAD
    return {"model": ErrorOut, "description": when,
            "content": {"application/json": {"example": {
                "error": {"code": code, "message": message}}}}}


def document_errors(app: FastAPI) -> None:
    """Give each route of ``app`` its own error list (before the document is built)."""
    for route in leaf_routes(app.routes):
        if isinstance(route, APIRoute):
            documented: dict[int | str, dict[str, Any]] = {
                status: response_of(route, status) for status in codes_of(route)}
            route.responses = {**documented, **route.responses}
