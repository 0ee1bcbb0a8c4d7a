"""The app's routes as they serve requests: those of included routers in place of the
routers (FastAPI wraps an included router in one route of its own)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from starlette.routing import BaseRoute


def leaf_routes(routes: Iterable[Any]) -> list[BaseRoute]:
    """The routes that serve requests, those of included routers in place of them."""
    leaves: list[BaseRoute] = []
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI's include_router
        if included is not None:
            leaves += leaf_routes(included.routes)
        else:
            leaves.append(route)
    return leaves
