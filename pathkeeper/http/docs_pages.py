"""The API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), with every
asset served by the service itself, so they load behind a firewall: the files are those
the fastapi-offline package ships (Swagger UI's and ReDoc's distributions, their
licenses Apache-2.0 and MIT)."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import Depends, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from pathkeeper.http.deps import public

ASSETS_URL = "/docs/assets"
ASSETS_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"


def install_docs(app: FastAPI, title: str) -> None:
    """Serve the two pages and their assets (the app is built with ``docs_url=None`` and
    ``redoc_url=None``, which would load them from a CDN)."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False, dependencies=[Depends(public)])
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url, title=f"{title} - Swagger UI",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
            swagger_ui_parameters=app.swagger_ui_parameters,
        )

    @app.get("/redoc", include_in_schema=False, dependencies=[Depends(public)])
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url, title=f"{title} - ReDoc",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon.png", with_google_fonts=False,
        )
