"""The FastAPI app: ``create_app`` builds the app's parts into ``app.state`` and includes
the routers of ``pathkeeper.http.routes``, whose handlers map one-to-one onto
``Coordinator`` calls.

Handlers receive the parts through dependencies (``deps``), so ``app.dependency_overrides``
can replace any of them. Every mutation answers ``{node, version, seq}``; see ``errors``
for the error shape, ``auth`` for keys and ``idempotency`` for ``Idempotency-Key``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict

from fastapi import FastAPI
from sqlalchemy.exc import SQLAlchemyError

from coordinator.api import Coordinator
from coordinator.async_statements import AsyncStatements
from coordinator.idempotency import purge
from coordinator.listener import NotifyHub
from pathkeeper.http import errors as service_errors
from pathkeeper.http.auth import Authenticator
from pathkeeper.http.docs_pages import install_docs
from pathkeeper.http.error_docs import document_errors
from pathkeeper.http.fast_path import FastPath, routes_of
from pathkeeper.http.limits import LimitsMiddleware
from pathkeeper.http.metrics import RequestMetrics, ServiceMetrics
from pathkeeper.http.routes import ROUTERS, indexer_status
from pathkeeper.http.search import Searcher
from pathkeeper.http.settings import ServiceSettings
from pathkeeper.http.threads import use_executor
from pathkeeper.http.ui import router as operator_page

log = logging.getLogger("pathkeeper.service")

def create_app(
    settings: ServiceSettings, coordinator: Coordinator | None = None
) -> FastAPI:
    """Build the app. Without ``coordinator`` it connects its own (closed on shutdown)."""
    app = FastAPI(
        title="Pathkeeper",
        version="1",
        description=(
            "Transactional namespace trees. Errors: {\"error\": {\"code\", \"message\"}}. "
            "A key used on a namespace it was not issued for gets 404, as if the "
            "namespace did not exist."
        ),
        lifespan=_lifespan,
        docs_url=None,
        redoc_url=None,
        # Route names ("rename_node", "stat_node_by_id"), not FastAPI's generated ids.
        generate_unique_id_function=lambda route: route.name,
    )
    install_docs(app, app.title)
    service_errors.install(app, settings.retry_after_seconds)
    coord = coordinator or _connect(settings)
    app.state.owns_coordinator = coordinator is None
    app.state.coordinator = coord
    app.state.settings = settings
    # With a directory the keys live there (a key may name namespaces of several servers).
    app.state.authenticator = Authenticator(coord.keys_engine, settings.auth_cache_seconds)
    app.state.metrics = ServiceMetrics()
    # Added first, so it runs inside the limits (a command is admitted like any request)
    # and in front of FastAPI's routing, whose table it reads (``fast_path``).
    app.add_middleware(FastPath, api=app)
    app.add_middleware(LimitsMiddleware, settings=settings,
                       authenticator=app.state.authenticator, metrics=app.state.metrics)
    # Outermost: the limits' refusals are requests too.
    app.add_middleware(RequestMetrics, metrics=app.state.metrics)
    # The fast path's statements on the event loop: opened by the lifespan, in its loop.
    app.state.statements = None
    app.state.hub = NotifyHub(*(shard.database_url() for shard in coord.shard_map.shards()))
    app.state.searcher = _searcher(settings)
    if not settings.auth:
        log.warning(
            "AUTHENTICATION IS DISABLED (--no-auth): every request is treated as an admin "
            "of every namespace. Use this for local development only."
        )
    for router in (*ROUTERS, indexer_status.router, operator_page):
        app.include_router(router)
    document_errors(app)
    # Refuse to start now on a hot route the fast path cannot serve as FastAPI would (the
    # middleware reads the table again when the app's stack is built).
    routes_of(app)
    return app


def _connect(settings: ServiceSettings) -> Coordinator:
    return Coordinator.connect(settings.database_url, directory_url=settings.directory_url,
                               statement_timeout=settings.statement_timeout_seconds,
                               **asdict(settings.coordinator))


def _searcher(settings: ServiceSettings) -> Searcher | None:
    if not settings.es_url:
        return None
    from indexer.search_client import open_search

    return Searcher(
        open_search(settings.es_url, security=settings.search_security,
                    request_timeout=settings.max_index_wait_seconds),
        settings.index_alias,
    )


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    state = app.state
    settings: ServiceSettings = state.settings
    # Every admitted request may hold a thread (the handlers' work is blocking).
    use_executor(settings.max_inflight + settings.max_long_polls + 8)
    coord: Coordinator = state.coordinator
    statements = AsyncStatements(
        None, coord.settings, wake=coord.wake_indexer,
        statement_timeout=settings.statement_timeout_seconds, shard_map=coord.shard_map,
    )
    await statements.open()
    state.statements = statements
    state.hub.start()
    stop_purge = threading.Event()
    purger = threading.Thread(
        target=_purge_loop, args=(state.coordinator, settings, stop_purge),
        name="pathkeeper-purge", daemon=True,
    )
    purger.start()
    try:
        yield
    finally:
        stop_purge.set()
        state.statements = None
        await statements.close()
        state.hub.stop()
        if state.searcher is not None:
            state.searcher.es.close()
        if state.owns_coordinator:
            state.coordinator.close()


def _purge_loop(coord: Coordinator, settings: ServiceSettings, stop: threading.Event) -> None:
    """Delete expired idempotency rows every ``idempotency_purge_seconds``, on every
    server (each keeps its namespaces' keys)."""
    while not stop.wait(settings.idempotency_purge_seconds):
        for shard, engine in coord.shard_engines():
            try:
                purge(engine)
            except SQLAlchemyError as exc:
                log.warning("idempotency purge failed on shard %s: %s", shard.name, exc)


def app_from_environment() -> FastAPI:
    """The app of one ``pathkeeper serve --workers N`` process (a uvicorn factory)."""
    import os

    from pathkeeper.http.settings import SETTINGS_ENV, settings_from_json

    return create_app(settings_from_json(os.environ[SETTINGS_ENV]))
