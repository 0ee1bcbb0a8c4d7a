"""The FastAPI app: routes map one-to-one onto ``Coordinator`` calls.

Nodes are addressed by path (``/v1/namespaces/{ns}/node?path=/a/b``, the path in a
query parameter so no URL normalisation can rewrite it) or by id
(``/v1/namespaces/{ns}/nodes/{id}``); both support the same reads and mutations.
Every mutation answers ``{node, version, seq}``; see ``errors`` for the error shape,
``auth`` for keys and ``idempotency`` for ``Idempotency-Key``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

import anyio.from_thread
import anyio.to_thread
from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from coordinator import paths
from coordinator.api import Coordinator, GroupTx
from coordinator.commands import (
    Command,
    CreateFile,
    Delete,
    Mkdir,
    Move,
    Rename,
    WriteFile,
)
from coordinator.db import is_retryable, set_statement_timeout, translate
from coordinator.errors import CoordinatorError, InvalidName, NotADirectory, Unavailable
from coordinator.idempotency import purge
from coordinator.importer import iter_lines
from coordinator.indexing import consumer_for, indexer_lag
from coordinator.tree import MutationResult
from coordinator.unit_of_work import UnitOfWork
from pathkeeper.http import errors as service_errors
from pathkeeper.http.auth import NO_AUTH, Authenticator, Principal
from pathkeeper.http.cursors import InvalidCursor, decode_name_cursor, encode_name_cursor
from pathkeeper.http.errors import BatchError, ServiceError
from pathkeeper.http.feed import NotifyHub, follow, parse_after
from pathkeeper.http.idempotency import request_hash, run_idempotent
from pathkeeper.http.limits import LimitsMiddleware, check_path
from pathkeeper.http.schemas import (
    BatchIn,
    BatchOut,
    CreateFileIn,
    ErrorOut,
    EventsOut,
    HealthOut,
    ImportOut,
    IndexedOut,
    ListOut,
    MkdirIn,
    MoveIn,
    MutationOut,
    NamespaceIn,
    NamespacesOut,
    NodeOut,
    ReadyOut,
    RenameIn,
    SearchOut,
    WriteIn,
)
from pathkeeper.http.search import Searcher, SearchQuery, invalid_cursor
from pathkeeper.http.settings import ServiceSettings

log = logging.getLogger("pathkeeper.service")

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut}
    for status in (400, 401, 403, 404, 409, 413, 422, 429, 503)
}

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
#: Static caps in the schema; the settings may lower them (``max_page``, ...).
MAX_PAGE = 1000
MAX_WAIT = 60.0
PageLimit = Annotated[int, Query(ge=1, le=MAX_PAGE)]
Cursor = Annotated[str | None, Query(max_length=2000)]
VersionQuery = Annotated[int | None, Query(ge=1, le=2**62)]
BEARER = HTTPBearer(auto_error=False, description="an API key: Bearer pk_...")


def current_principal(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
) -> Principal:
    """The caller, from its API key (401 without a valid one)."""
    settings: ServiceSettings = request.app.state.settings
    if not settings.auth:
        return NO_AUTH
    if creds is None:
        raise service_errors.unauthorized()
    authenticator: Authenticator = request.app.state.authenticator
    return authenticator.authenticate(f"{creds.scheme} {creds.credentials}")


Who = Annotated[Principal, Depends(current_principal)]

IfMatchHeader = Annotated[
    str | None, Header(alias="If-Match", max_length=64, description="the node version")
]


def decode_list_cursor(cursor: str) -> str:
    try:
        return decode_name_cursor(cursor)
    except InvalidCursor as exc:
        raise invalid_cursor() from exc


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


def create_app(
    settings: ServiceSettings, coordinator: Coordinator | None = None
) -> FastAPI:
    """Build the app. Without ``coordinator`` it connects its own (closed on shutdown)."""
    owned = coordinator is None
    coord = coordinator or Coordinator.connect(
        settings.database_url,
        pool_size=settings.pool_size,
        max_overflow=settings.max_overflow,
        pool_timeout=settings.pool_timeout_seconds,
        lock_timeout=settings.lock_timeout_seconds,
        max_depth=settings.max_depth,
        **settings.coordinator_options,
    )
    if owned:
        set_statement_timeout(coord.engine, settings.statement_timeout_seconds)
    consumer = settings.indexer_consumer or consumer_for(settings.index_alias)
    authenticator = Authenticator(coord.engine, settings.auth_cache_seconds)
    hub = NotifyHub(settings.database_url)
    searcher: Searcher | None = None
    if settings.es_url:
        from indexer.search_client import open_search

        searcher = Searcher(
            open_search(settings.es_url, request_timeout=settings.max_index_wait_seconds),
            settings.index_alias,
        )
    if not settings.auth:
        log.warning(
            "AUTHENTICATION IS DISABLED (--no-auth): every request is treated as an admin "
            "of every namespace. Use this for local development only."
        )
    stop_purge = threading.Event()

    def purge_loop() -> None:
        while not stop_purge.wait(settings.idempotency_purge_seconds):
            try:
                purge(coord.engine)
            except SQLAlchemyError as exc:
                log.warning("idempotency purge failed: %s", exc)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        limiter = anyio.to_thread.current_default_thread_limiter()
        # Every admitted request may hold a worker thread (the handlers are sync).
        limiter.total_tokens = max(
            limiter.total_tokens, settings.max_inflight + settings.max_long_polls + 8
        )
        hub.start()
        purger = threading.Thread(target=purge_loop, name="pathkeeper-purge", daemon=True)
        purger.start()
        try:
            yield
        finally:
            stop_purge.set()
            hub.stop()
            if searcher is not None:
                searcher.es.close()
            if owned:
                coord.close()

    app = FastAPI(
        title="Pathkeeper",
        version="1",
        description=(
            "Transactional namespace trees. Errors: {\"error\": {\"code\", \"message\"}}. "
            "A key used on a namespace it was not issued for gets 404, as if the "
            "namespace did not exist."
        ),
        lifespan=lifespan,
        responses=ERROR_RESPONSES,
    )
    service_errors.install(app, settings.retry_after_seconds)
    app.add_middleware(
        LimitsMiddleware,
        max_body_bytes=settings.max_body_bytes,
        max_inflight=settings.max_inflight,
        retry_after=settings.retry_after_seconds,
        max_inflight_per_key=settings.max_inflight_per_key,
        max_long_polls=settings.max_long_polls,
        max_long_polls_per_key=settings.max_long_polls_per_key,
    )
    app.state.coordinator = coord
    app.state.settings = settings
    app.state.authenticator = authenticator

    def _path(value: str) -> str:
        return check_path(value, settings.max_path_bytes)

    def mutate(
        request: Request,
        ns: str,
        who: Principal,
        idem_key: str | None,
        if_match: str | None,
        payload: Any,
        command: Command,
        created: bool = False,
    ) -> JSONResponse:
        who.require(ns, "write")
        digest = request_hash(
            request.method, request.url.path, dict(request.query_params), if_match, payload
        )

        def answer(result: MutationResult) -> tuple[int, dict[str, Any]]:
            status = 201 if created and result.seq is not None else 200
            return status, MutationOut.of(result).model_dump(mode="json")

        outcome = run_idempotent(
            coord, ns, idem_key, who.key_id, digest, settings.idempotency_ttl_seconds,
            lambda uow: command.apply(uow.tree), answer,
        )
        headers = {"Idempotent-Replayed": "true"} if outcome.replayed else None
        return JSONResponse(outcome.body, outcome.status, headers=headers)

    # ------------------------------------------------------------------ health

    @app.get("/healthz", response_model=HealthOut, tags=["health"])
    def healthz() -> HealthOut:
        """Liveness: the process answers."""
        return HealthOut(status="ok")

    @app.get("/readyz", response_model=ReadyOut, tags=["health"],
             responses={503: {"model": ReadyOut}})
    def readyz() -> JSONResponse:
        """Readiness: PostgreSQL answers; reports the indexer's lag (does not fail on it)."""
        try:
            lag = indexer_lag(coord.engine, consumer)
        except (SQLAlchemyError, CoordinatorError) as exc:
            out = ReadyOut(status="unavailable", postgres=False, detail=str(exc)[:500])
            return JSONResponse(out.model_dump(mode="json"), 503,
                                headers={"Retry-After": str(settings.retry_after_seconds)})
        lost = searcher.index_lost() if searcher is not None and lag.checkpoint else None
        if lost is not None:
            out = ReadyOut(status="unavailable", postgres=True, detail=lost)
            return JSONResponse(out.model_dump(mode="json"), 503,
                                headers={"Retry-After": str(settings.retry_after_seconds)})
        out = ReadyOut(
            status="ok",
            postgres=True,
            indexer_lag_events=lag.events,
            indexer_lag_seconds=lag.seconds,
        )
        return JSONResponse(out.model_dump(mode="json"), 200)

    # -------------------------------------------------------------- namespaces

    @app.get("/v1/namespaces", response_model=NamespacesOut, tags=["namespaces"])
    def list_namespaces(who: Who) -> NamespacesOut:
        """The namespaces this key may use that exist."""
        who.require(None, "read")
        return NamespacesOut(namespaces=[n for n in coord.namespaces() if who.covers(n)])

    @app.post("/v1/namespaces", response_model=MutationOut, status_code=201,
              tags=["namespaces"])
    def create_namespace(body: NamespaceIn, who: Who) -> MutationOut:
        """Create a namespace (admin scope). A key not issued for the name gets 403."""
        if not who.covers(body.name):
            raise service_errors.forbidden("this API key is not issued for that namespace")
        who.require(body.name, "admin")
        return MutationOut.of(coord.create_namespace(body.name))

    @app.delete("/v1/namespaces/{ns}", response_model=MutationOut, tags=["namespaces"])
    def drop_namespace(ns: NsParam, who: Who, force: bool = False) -> MutationOut:
        """Drop a namespace (admin scope); ``force`` drops a non-empty one."""
        who.require(ns, "admin")
        return MutationOut.of(coord.drop_namespace(ns, force=force))

    # ------------------------------------------------------------------- reads

    def _stat(ns: str, ref: str, who: Principal) -> JSONResponse:
        who.require(ns, "read")
        node = coord.run(ns, lambda uow: uow.tree.stat(ref))
        return JSONResponse(
            NodeOut.of(node).model_dump(mode="json"), headers={"ETag": f'"{node.version}"'}
        )

    def _list(ns: str, ref: str, who: Principal, cursor: str | None, limit: int) -> ListOut:
        who.require(ns, "read")
        limit = min(limit, settings.max_page)
        after = decode_list_cursor(cursor) if cursor else None
        nodes = coord.run(ns, lambda uow: uow.tree.listdir(ref, after, limit))
        next_cursor = encode_name_cursor(nodes[-1].name) if len(nodes) == limit else None
        return ListOut(nodes=[NodeOut.of(n) for n in nodes], cursor=next_cursor)

    @app.get("/v1/namespaces/{ns}/node", response_model=NodeOut, tags=["nodes by path"])
    def stat_path(ns: NsParam, path: PathQuery, who: Who) -> JSONResponse:
        """The node at ``path`` (ETag: its version)."""
        return _stat(ns, _path(path), who)

    @app.get("/v1/namespaces/{ns}/nodes/{node_id}", response_model=NodeOut,
             tags=["nodes by id"])
    def stat_id(ns: NsParam, node_id: NodeIdParam, who: Who) -> JSONResponse:
        """The node with this id (ETag: its version)."""
        return _stat(ns, node_id, who)

    @app.get("/v1/namespaces/{ns}/node/children", response_model=ListOut,
             tags=["nodes by path"])
    def list_path(
        ns: NsParam, path: PathQuery, who: Who, cursor: Cursor = None,
        limit: PageLimit = 100,
    ) -> ListOut:
        """Children of the directory at ``path``, by name; pass ``cursor`` for the next page."""
        return _list(ns, _path(path), who, cursor, limit)

    @app.get("/v1/namespaces/{ns}/nodes/{node_id}/children", response_model=ListOut,
             tags=["nodes by id"])
    def list_id(
        ns: NsParam, node_id: NodeIdParam, who: Who, cursor: Cursor = None,
        limit: PageLimit = 100,
    ) -> ListOut:
        """Children of the directory with this id, by name."""
        return _list(ns, node_id, who, cursor, limit)

    # --------------------------------------------------------------- creation

    @app.post("/v1/namespaces/{ns}/dirs", response_model=MutationOut, status_code=201,
              tags=["nodes by path"])
    def mkdir(
        request: Request, ns: NsParam, body: MkdirIn, who: Who,
        idempotency_key: IdempotencyHeader = None,
    ) -> JSONResponse:
        """Create a directory (``parents``: like mkdir -p; 200 with seq null if it existed)."""
        path = _path(body.path)
        return mutate(request, ns, who, idempotency_key, None, body.model_dump(mode="json"),
                      Mkdir(path, body.parents), created=True)

    @app.post("/v1/namespaces/{ns}/files", response_model=MutationOut, status_code=201,
              tags=["nodes by path"])
    def create_file(
        request: Request, ns: NsParam, body: CreateFileIn, who: Who,
        idempotency_key: IdempotencyHeader = None,
    ) -> JSONResponse:
        """Create a file with content and metadata."""
        path = _path(body.path)
        return mutate(
            request, ns, who, idempotency_key, None, body.model_dump(mode="json"),
            CreateFile(path, body.content, body.metadata), created=True,
        )

    # -------------------------------------------------------------- mutations

    def _write(request: Request, ns: str, ref: str, body: WriteIn, who: Principal,
               key: str | None, if_match: str | None) -> JSONResponse:
        version = parse_if_match(if_match, body.if_version)
        return mutate(
            request, ns, who, key, if_match, body.model_dump(mode="json"),
            WriteFile(ref, body.content, body.metadata, version),
        )

    def _move(request: Request, ns: str, ref: str, body: MoveIn, who: Principal,
              key: str | None, if_match: str | None) -> JSONResponse:
        version = parse_if_match(if_match, body.if_version)
        dst = _path(body.dst)
        return mutate(request, ns, who, key, if_match, body.model_dump(mode="json"),
                      Move(ref, dst, version))

    def _rename(request: Request, ns: str, ref: str, body: RenameIn, who: Principal,
                key: str | None, if_match: str | None) -> JSONResponse:
        version = parse_if_match(if_match, body.if_version)
        return mutate(request, ns, who, key, if_match, body.model_dump(mode="json"),
                      Rename(ref, body.name, version))

    def _delete(request: Request, ns: str, ref: str, recursive: bool,
                if_version: int | None, who: Principal, key: str | None,
                if_match: str | None) -> JSONResponse:
        version = parse_if_match(if_match, if_version)
        return mutate(request, ns, who, key, if_match, None,
                      Delete(ref, recursive, version))

    @app.put("/v1/namespaces/{ns}/node/content", response_model=MutationOut,
             tags=["nodes by path"])
    def write_path(request: Request, ns: NsParam, path: PathQuery, body: WriteIn, who: Who,
                   idempotency_key: IdempotencyHeader = None,
                   if_match: IfMatchHeader = None) -> JSONResponse:
        """Replace a file's content (and metadata, if given)."""
        return _write(request, ns, _path(path), body, who, idempotency_key, if_match)

    @app.put("/v1/namespaces/{ns}/nodes/{node_id}/content", response_model=MutationOut,
             tags=["nodes by id"])
    def write_id(request: Request, ns: NsParam, node_id: NodeIdParam, body: WriteIn, who: Who,
                 idempotency_key: IdempotencyHeader = None,
                 if_match: IfMatchHeader = None) -> JSONResponse:
        """Replace a file's content (and metadata, if given)."""
        return _write(request, ns, node_id, body, who, idempotency_key, if_match)

    @app.post("/v1/namespaces/{ns}/node/move", response_model=MutationOut,
              tags=["nodes by path"])
    def move_path(request: Request, ns: NsParam, path: PathQuery, body: MoveIn, who: Who,
                  idempotency_key: IdempotencyHeader = None,
                  if_match: IfMatchHeader = None) -> JSONResponse:
        """Move (and possibly rename) the node to the full path ``dst``."""
        return _move(request, ns, _path(path), body, who, idempotency_key, if_match)

    @app.post("/v1/namespaces/{ns}/nodes/{node_id}/move", response_model=MutationOut,
              tags=["nodes by id"])
    def move_id(request: Request, ns: NsParam, node_id: NodeIdParam, body: MoveIn, who: Who,
                idempotency_key: IdempotencyHeader = None,
                if_match: IfMatchHeader = None) -> JSONResponse:
        """Move (and possibly rename) the node to the full path ``dst``."""
        return _move(request, ns, node_id, body, who, idempotency_key, if_match)

    @app.post("/v1/namespaces/{ns}/node/rename", response_model=MutationOut,
              tags=["nodes by path"])
    def rename_path(request: Request, ns: NsParam, path: PathQuery, body: RenameIn, who: Who,
                    idempotency_key: IdempotencyHeader = None,
                    if_match: IfMatchHeader = None) -> JSONResponse:
        """Rename the node in place."""
        return _rename(request, ns, _path(path), body, who, idempotency_key, if_match)

    @app.post("/v1/namespaces/{ns}/nodes/{node_id}/rename", response_model=MutationOut,
              tags=["nodes by id"])
    def rename_id(request: Request, ns: NsParam, node_id: NodeIdParam, body: RenameIn,
                  who: Who, idempotency_key: IdempotencyHeader = None,
                  if_match: IfMatchHeader = None) -> JSONResponse:
        """Rename the node in place."""
        return _rename(request, ns, node_id, body, who, idempotency_key, if_match)

    @app.delete("/v1/namespaces/{ns}/node", response_model=MutationOut,
                tags=["nodes by path"])
    def delete_path(request: Request, ns: NsParam, path: PathQuery, who: Who,
                    recursive: bool = False, if_version: VersionQuery = None,
                    idempotency_key: IdempotencyHeader = None,
                    if_match: IfMatchHeader = None) -> JSONResponse:
        """Delete the node (a non-empty directory only with ``recursive``)."""
        return _delete(request, ns, _path(path), recursive, if_version, who,
                       idempotency_key, if_match)

    @app.delete("/v1/namespaces/{ns}/nodes/{node_id}", response_model=MutationOut,
                tags=["nodes by id"])
    def delete_id(request: Request, ns: NsParam, node_id: NodeIdParam, who: Who,
                  recursive: bool = False, if_version: VersionQuery = None,
                  idempotency_key: IdempotencyHeader = None,
                  if_match: IfMatchHeader = None) -> JSONResponse:
        """Delete the node (a non-empty directory only with ``recursive``)."""
        return _delete(request, ns, node_id, recursive, if_version, who,
                       idempotency_key, if_match)

    # ------------------------------------------------------------------ batch

    @app.post("/v1/namespaces/{ns}/batch", response_model=BatchOut, tags=["batch"])
    def batch(request: Request, ns: NsParam, body: BatchIn, who: Who,
              idempotency_key: IdempotencyHeader = None) -> JSONResponse:
        """Apply the operations atomically, in order: every result, or the first error with
        its ``index`` and nothing applied."""
        ops = [_operation(op.model_dump()) for op in body.operations]
        if len(ops) > coord.settings.max_group_ops:
            raise ServiceError(413, "too_large",
                               f"at most {coord.settings.max_group_ops} operations per batch")

        def work(uow: UnitOfWork) -> list[MutationResult]:
            group = GroupTx(uow.tree, coord.settings.max_group_ops)
            results = []
            for index, op in enumerate(ops):
                try:
                    results.append(group.execute(op))
                except CoordinatorError as exc:
                    raise BatchError(index, exc) from exc
                except DBAPIError as exc:
                    if is_retryable(exc):
                        raise  # Coordinator.run re-runs the whole batch
                    raise BatchError(index, translate(exc)) from exc
            return results

        def answer(results: list[MutationResult]) -> tuple[int, dict[str, Any]]:
            out = BatchOut(results=[MutationOut.of(r) for r in results])
            return 200, out.model_dump(mode="json")

        who.require(ns, "write")
        digest = request_hash(request.method, request.url.path, dict(request.query_params),
                              None, body.model_dump(mode="json"))
        outcome = run_idempotent(coord, ns, idempotency_key, who.key_id, digest,
                                 settings.idempotency_ttl_seconds, work, answer)
        headers = {"Idempotent-Replayed": "true"} if outcome.replayed else None
        return JSONResponse(outcome.body, outcome.status, headers=headers)

    # ----------------------------------------------------------------- search

    @app.post("/v1/namespaces/{ns}/import", response_model=ImportOut, status_code=201,
              tags=["import"],
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/x-ndjson": {"schema": {"type": "string"}}}}})
    async def import_nodes(request: Request, ns: NsParam, who: Who) -> JSONResponse:
        """Import JSON Lines (one node a line: ``{"path", "kind", "content", "metadata"}``,
        any order, missing parents created), streamed: the body is read as it arrives,
        never held whole. All or nothing; bad lines are listed with their numbers."""
        who.require(ns, "write")
        body = request.stream().__aiter__()

        async def next_chunk() -> bytes:
            return await body.__anext__()

        def chunks() -> Iterator[bytes]:
            # Runs in the worker thread: each chunk is awaited on the event loop, so the
            # client is read only as fast as the import consumes it.
            while True:
                try:
                    yield anyio.from_thread.run(next_chunk)
                except StopAsyncIteration:
                    return

        result = await anyio.to_thread.run_sync(
            lambda: coord.import_nodes(ns, iter_lines(chunks()))
        )
        out = ImportOut(
            namespace=result.namespace, lines=result.lines, created=result.created,
            implied_dirs=result.implied_dirs, first_seq=result.first_seq,
            last_seq=result.last_seq, seconds=round(result.seconds, 3),
        )
        return JSONResponse(out.model_dump(mode="json"), 201)

    @app.get("/v1/namespaces/{ns}/search", response_model=SearchOut, tags=["search"])
    def search(
        ns: NsParam,
        who: Who,
        q: Annotated[str | None, Query(max_length=1000, description="full text")] = None,
        under: Annotated[str | None, Query(max_length=paths.MAX_PATH_BYTES,
                                           description="only this subtree")] = None,
        in_dir: Annotated[str | None, Query(alias="dir", max_length=paths.MAX_PATH_BYTES,
                                            description="only children of this directory")
                          ] = None,
        kind: Literal["file", "dir"] | None = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
        cursor: Cursor = None,
        min_seq: Annotated[int | None, Query(ge=0, le=2**62,
                                             description="wait until indexed")] = None,
    ) -> SearchOut:
        """Search the namespace's index. ``min_seq`` (a mutation's ``seq``) waits, bounded,
        until the indexer has applied it, so a caller sees its own changes."""
        who.require(ns, "read")
        limit = min(limit, settings.max_page)
        if searcher is None:
            raise Unavailable("search is not configured (no Elasticsearch URL)")
        root = coord.run(ns, lambda uow: uow.tree.stat("/"))  # 404 for a missing namespace
        if under is not None:
            under = paths.join_path(paths.split_path(_path(under), settings.max_depth))
        parent_id = None
        if in_dir is not None:
            dir_path = _path(in_dir)
            node = coord.run(ns, lambda uow: uow.tree.stat(dir_path))
            if not node.is_dir:
                raise NotADirectory(f"{node.path} is a file")
            parent_id = node.id
        if min_seq is not None:
            _wait_indexed(min_seq)
            searcher.refresh()
        del root
        return searcher.search(SearchQuery(ns, q or None, under, parent_id, kind, limit, cursor))

    def _wait_indexed(seq: int) -> None:
        if not coord.wait_indexed(seq, timeout=settings.max_index_wait_seconds,
                                  consumer=consumer):
            raise ServiceError(503, "index_lagging",
                               f"the indexer has not reached seq {seq} yet; retry later")

    @app.get("/v1/indexed", response_model=IndexedOut, tags=["search"])
    def indexed(
        who: Who,
        seq: Annotated[int, Query(ge=0, le=2**62, description="a mutation's seq")],
        timeout: Annotated[float, Query(ge=0, le=MAX_WAIT)] = 10.0,
    ) -> IndexedOut:
        """Wait (bounded) until the indexer has applied every event up to ``seq``:
        ``Coordinator.wait_indexed`` over HTTP. Answers whether it has."""
        who.require(None, "read")
        wait = min(timeout, settings.max_index_wait_seconds)
        return IndexedOut(indexed=coord.wait_indexed(seq, timeout=wait, consumer=consumer))

    # ----------------------------------------------------------------- events

    @app.get("/v1/namespaces/{ns}/events", response_model=EventsOut, tags=["events"])
    def events(
        ns: NsParam,
        who: Who,
        after: Annotated[str | None, Query(max_length=20, description="cursor")] = None,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT)] = 0.0,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    ) -> EventsOut:
        """Events of the namespace in commit order after ``after``; with ``wait``, long-polls
        up to that many seconds for the first one. Continue from the returned ``cursor``."""
        who.require(ns, "read")
        wait = min(wait, settings.max_feed_wait_seconds)
        limit = min(limit, settings.max_page)
        paths.validate_namespace(ns)
        return follow(coord, hub, ns, parse_after(after), limit, wait)

    return app


def _operation(op: dict[str, Any]) -> Command:
    """A batch item as a coordinator command."""
    kind = op.pop("op")
    for cls in (Mkdir, CreateFile, WriteFile, Move, Rename, Delete):
        if kind == cls.__dataclass_fields__["op"].default:
            return cls(**op)
    raise InvalidName(f"unknown operation {kind!r}")  # unreachable: the schema is closed


def app_from_environment() -> FastAPI:
    """The app of one ``pathkeeper serve --workers N`` process (a uvicorn factory)."""
    import os

    from pathkeeper.http.settings import SETTINGS_ENV, settings_from_json

    return create_app(settings_from_json(os.environ[SETTINGS_ENV]))
