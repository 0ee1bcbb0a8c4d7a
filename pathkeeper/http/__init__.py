"""Pathkeeper's HTTP interface: a thin FastAPI edge over ``coordinator.Coordinator``.

``create_app(settings)`` builds the app; ``pathkeeper serve`` runs it under uvicorn.
Domain rules stay in the coordinator; this package only maps HTTP to calls and
typed errors to status codes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathkeeper.http.app import create_app
    from pathkeeper.http.settings import ServiceSettings

__all__ = ["ServiceSettings", "create_app"]


def __getattr__(name: str) -> object:
    # Lazy: the HTTP client imports this package's URL and cursor modules without the
    # server's dependencies, and the CLI imports the settings without FastAPI.
    if name == "create_app":
        from pathkeeper.http.app import create_app

        return create_app
    if name == "ServiceSettings":
        from pathkeeper.http.settings import ServiceSettings

        return ServiceSettings
    raise AttributeError(name)
