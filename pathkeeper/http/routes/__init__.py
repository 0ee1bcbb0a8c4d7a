"""The app's routes, one router per area; ``create_app`` includes ``ROUTERS``."""

from __future__ import annotations

from fastapi import APIRouter

from pathkeeper.http.routes import (
    batch,
    commands,
    events,
    health,
    importing,
    metrics,
    namespaces,
    nodes,
    search,
)

ROUTERS: tuple[APIRouter, ...] = (
    health.router,
    metrics.router,
    namespaces.router,
    nodes.router,
    commands.router,
    batch.router,
    importing.router,
    search.router,
    events.router,
)
