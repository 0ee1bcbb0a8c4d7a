"""The command routes, registered from ``operations.COMMAND_ROUTES``: one handler per
command, for both URL forms of a node when the command names one.

A handler builds the command from the body (``schemas.BODY_OF``: the command's fields
that the URL does not carry), the query fields and the node of the URL, and runs it
under the request's ``Idempotency-Key``. Every route answers ``{node, version, seq}``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel

from coordinator.api import Coordinator
from pathkeeper.http.auth import Principal
from pathkeeper.http.calls import CALLS, serving
from pathkeeper.http.deps import (
    CoordDep,
    IdempotencyHeader,
    IfMatchHeader,
    NodeRef,
    NsParam,
    Ref,
    SettingsDep,
    Writer,
)
from pathkeeper.http.idempotency import replayable_response, request_hash, run_idempotent
from pathkeeper.http.operations import COMMAND_ROUTES, NAMESPACE_URL, CommandRoute
from pathkeeper.http.routes.nodes import add_node_route
from pathkeeper.http.schemas import MutationOut, command_fields
from pathkeeper.http.settings import ServiceSettings
from pathkeeper.http.threads import blocking

router = APIRouter()


def command_endpoint(route: CommandRoute) -> Callable[..., Awaitable[Response]]:
    """The handler of ``route``'s command; its signature (what FastAPI reads, validates
    and documents) is built from the route (``_signature``)."""
    call = CALLS[route]

    def endpoint(
        *, request: Request, ns: str, who: Principal, coord: Coordinator,
        settings: ServiceSettings, ref: NodeRef | None = None, body: BaseModel | None = None,
        idempotency_key: str | None = None, if_match: str | None = None, **query: Any,
    ) -> Response:
        command = call.command(settings, ref=ref, body=body, if_match=if_match, query=query)
        if idempotency_key is None:
            # Nothing to record with the change: the command alone, as the Python API runs
            # it (a lone rename is one statement).
            return call.response(coord.execute(ns, command))
        payload = None if body is None else body.model_dump(mode="json")
        digest = request_hash(
            request.method, request.url.path, dict(request.query_params), if_match, payload
        )
        outcome = run_idempotent(
            coord, ns, idempotency_key, who.key_id, digest, settings.idempotency_ttl_seconds,
            lambda uow: command.apply(uow.tree), call.answer,
        )
        return replayable_response(outcome)

    endpoint.__signature__ = _signature(route, call.body_model)  # type: ignore[attr-defined]
    return serving(call)(blocking(endpoint))


def _signature(route: CommandRoute, body_model: type[BaseModel] | None) -> inspect.Signature:
    def param(name: str, annotation: Any, default: Any = inspect.Parameter.empty
              ) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                 annotation=annotation)

    params = [param("request", Request), param("ns", NsParam), param("who", Writer),
              param("coord", CoordDep), param("settings", SettingsDep)]
    if route.by_node:
        params.append(param("ref", Ref))
    if body_model is not None:
        params.append(param("body", body_model))
    for name, (hint, default) in command_fields(route.command, route.query).items():
        params.append(param(name, Annotated[hint, Query()], default))
    params.append(param("idempotency_key", IdempotencyHeader, None))
    if route.by_node:  # a compare-and-swap on the node the URL names
        params.append(param("if_match", IfMatchHeader, None))
    return inspect.Signature(params, return_annotation=Response)


for _route in COMMAND_ROUTES:
    _options: dict[str, Any] = {
        "response_model": MutationOut, "status_code": 201 if _route.creates else 200,
    }
    if _route.by_node:
        add_node_route(router, _route.suffix, command_endpoint(_route), method=_route.method,
                       name=_route.name, docs=(_route.doc, _route.doc), **_options)
    else:
        router.add_api_route(
            f"{NAMESPACE_URL}{_route.suffix}", command_endpoint(_route),
            methods=[_route.method], name=_route.name, description=_route.doc,
            tags=["nodes by path"], **_options,
        )
