"""Pathkeeper's HTTP interface: a thin FastAPI edge over ``coordinator.Coordinator``.

``create_app(settings)`` builds the app; ``pathkeeper serve`` runs it under uvicorn.
Domain rules stay in the coordinator; this package only maps HTTP to calls and
typed errors to status codes.
"""

from __future__ import annotations

from pathkeeper.http.settings import ServiceSettings

__all__ = ["ServiceSettings", "create_app"]


def __getattr__(name: str) -> object:
    # Lazy, so importing the settings (e.g. from the CLI) does not import FastAPI.
    if name == "create_app":
        from pathkeeper.http.app import create_app

        return create_app
    raise AttributeError(name)
