"""What the route handlers depend on, as FastAPI dependencies.

The app's parts (coordinator, settings, searcher, ...) live in ``app.state``, built by
``create_app``; handlers receive them through the ``get_*`` functions below, so a
test can swap any of them with ``app.dependency_overrides``. Authorization is a
dependency too: every route declares exactly one scope check (``requires`` and the
others below; a test walks the routes), which yields the caller's ``Principal``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import Depends, Header, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from coordinator import paths
from coordinator.api import Coordinator
from coordinator.indexing import consumer_for
from coordinator.listener import NotifyHub
from pathkeeper.http.auth import NO_AUTH, PRINCIPAL_SCOPE_KEY, Authenticator, Principal, bearer_of
from pathkeeper.http.errors import ServiceError
from pathkeeper.http.limits import check_path
from pathkeeper.http.search import Searcher
from pathkeeper.http.settings import ServiceSettings

# ------------------------------------------------------------------ the app's parts
#
# Dependencies that do no I/O are ``async def``: FastAPI runs a plain ``def`` one in its
# thread pool, and each such hand-off (two thread switches under the GIL) cost more CPU
# than the whole dependency; a request has several of them.


async def get_coordinator(request: Request) -> Coordinator:
    coord: Coordinator = request.app.state.coordinator
    return coord


async def get_settings(request: Request) -> ServiceSettings:
    settings: ServiceSettings = request.app.state.settings
    return settings


async def get_searcher(request: Request) -> Searcher | None:
    """None when no Elasticsearch URL is configured."""
    searcher: Searcher | None = request.app.state.searcher
    return searcher


async def get_hub(request: Request) -> NotifyHub:
    hub: NotifyHub = request.app.state.hub
    return hub


async def get_authenticator(request: Request) -> Authenticator:
    authenticator: Authenticator = request.app.state.authenticator
    return authenticator


CoordDep = Annotated[Coordinator, Depends(get_coordinator)]
SettingsDep = Annotated[ServiceSettings, Depends(get_settings)]
SearcherDep = Annotated[Searcher | None, Depends(get_searcher)]
HubDep = Annotated[NotifyHub, Depends(get_hub)]


async def get_consumer(settings: SettingsDep) -> str:
    """The indexer's checkpoint consumer (for readiness lag and ``min_seq`` waits)."""
    return settings.indexer_consumer or consumer_for(settings.index_alias)


ConsumerDep = Annotated[str, Depends(get_consumer)]

# ------------------------------------------------------------------- parameters

NsParam = Annotated[
    str, Path(min_length=1, max_length=paths.NAMESPACE_MAX, description="namespace")
]
PathQuery = Annotated[
    str, Query(min_length=1, max_length=paths.MAX_PATH_BYTES, description="absolute path")
]
NodeIdParam = Annotated[str, Path(min_length=1, max_length=64, description="node id")]
IdempotencyHeader = Annotated[
    str | None,
    Header(alias="Idempotency-Key", max_length=200,
           description="retrying with the same key returns the original answer"),
]
IfMatchHeader = Annotated[
    str | None, Header(alias="If-Match", max_length=64, description="the node version")
]
#: Static caps in the schema; the settings may lower them (``max_page``, ...).
MAX_PAGE = 1000
MAX_WAIT = 60.0
PageLimit = Annotated[int, Query(ge=1, le=MAX_PAGE)]
Cursor = Annotated[str | None, Query(max_length=2000)]


def parse_if_match(header: str | None, body_version: int | None) -> int | None:
    """The expected version from ``If-Match`` (``"3"``, ``3`` or ``W/"3"``) or the body."""
    if header is None:
        return body_version
    value = header.strip().removeprefix("W/").strip('"')
    if not value.isdigit() or len(value) > 18 or int(value) < 1:
        raise ServiceError(422, "invalid_request", "If-Match must be a node version")
    version = int(value)
    if body_version is not None and body_version != version:
        raise ServiceError(422, "invalid_request", "If-Match and if_version disagree")
    return version


def checked_path(value: str, settings: ServiceSettings) -> str:
    return check_path(value, settings.max_path_bytes)


# ------------------------------------------------------------------ node references
#
# A node operation is one handler registered for two URLs: ``.../node?path=/a/b`` and
# ``.../nodes/{node_id}``. Each URL form declares (and validates) its own parameter
# with a route dependency (``by_path``, ``by_id``), so the OpenAPI document shows
# exactly one of them per route; the handler takes ``NodeRef``, which reads whichever
# the request has.


async def by_path(path: PathQuery) -> None:
    """Declares the ``path`` query parameter of a node route by path."""


async def by_id(node_id: NodeIdParam) -> None:
    """Declares the ``{node_id}`` segment of a node route by id."""


@dataclass(frozen=True)
class NodeRef:
    """The node a request names: a path (from ``?path=``) or an id."""

    value: str
    is_path: bool

    def checked(self, settings: ServiceSettings) -> str:
        """The reference for the coordinator; a path within the service's own limit."""
        return checked_path(self.value, settings) if self.is_path else self.value


async def node_ref(request: Request) -> NodeRef:
    node_id = request.path_params.get("node_id")
    if node_id is not None:
        return NodeRef(str(node_id), False)
    # Missing only when ``by_path`` already failed validation: the handler will not run.
    return NodeRef(request.query_params.get("path", ""), True)


Ref = Annotated[NodeRef, Depends(node_ref)]

# ---------------------------------------------------------------- authorization

BEARER = HTTPBearer(auto_error=False, description="an API key: Bearer pk_...")


async def current_principal(
    request: Request,
    scheme: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
    settings: SettingsDep,
    authenticator: Annotated[Authenticator, Depends(get_authenticator)],
) -> Principal:
    """The caller, from its API key (401 without a valid one). ``scheme`` declares the
    bearer scheme in the OpenAPI document; the header itself is read by ``bearer_of``,
    the one rule the fast path uses too."""
    del scheme
    bearer = bearer_of(request.headers.get("authorization"))
    return await principal_of(bearer, settings, authenticator,
                              request.scope.get(PRINCIPAL_SCOPE_KEY))


async def principal_of(
    bearer: str | None, settings: ServiceSettings, authenticator: Authenticator,
    known: Principal | None = None,
) -> Principal:
    """The caller of a request with bearer credentials ``bearer`` (see ``bearer_of``):
    ``known``, the principal the limits already authenticated for it, if any."""
    if not settings.auth:
        return NO_AUTH
    if known is not None:
        return known
    return await authenticator.principal(bearer)


Who = Annotated[Principal, Depends(current_principal)]
Scope = Literal["read", "write", "admin"]

#: Every scope check, and the scope it demands (None: the route is public).
SCOPE_CHECKS: dict[Callable[..., Any], Scope | None] = {}


def requires(scope: Scope) -> Callable[..., Awaitable[Principal]]:
    """The caller, allowed a ``scope`` operation on the namespace of the path (a
    namespace its key does not cover is 404, as if it did not exist)."""

    async def check(ns: NsParam, who: Who) -> Principal:
        who.require(ns, scope)
        return who

    SCOPE_CHECKS[check] = scope
    return check


def requires_any_namespace(scope: Scope) -> Callable[..., Awaitable[Principal]]:
    """The caller, with ``scope``, for a route not on one namespace of the path (the
    handler limits what it does to the namespaces the key covers)."""

    async def check(who: Who) -> Principal:
        who.require(None, scope)
        return who

    SCOPE_CHECKS[check] = scope
    return check


async def public() -> None:
    """No key needed (health probes)."""


SCOPE_CHECKS[public] = None

READ, WRITE, ADMIN = requires("read"), requires("write"), requires("admin")
ANY_READ, ANY_ADMIN = requires_any_namespace("read"), requires_any_namespace("admin")
#: The checks as parameters, for handlers that use the principal.
Writer = Annotated[Principal, Depends(WRITE)]
AnyReader = Annotated[Principal, Depends(ANY_READ)]
AnyAdmin = Annotated[Principal, Depends(ANY_ADMIN)]
