"""``/ui``: the read-only operator page. The service serves a static shell, one HTML page,
one script and one style sheet (``static/``, shipped in the package); the script asks for
an API key once, keeps it in the tab's session storage (never in a URL) and reads
everything through the ``/v1`` routes with it: the indexer's lag and holders
(``/v1/indexer/status``), the namespace's newest events (the change feed), its tree
and search. So the page needs no key and holds no data, and a key reads through it
exactly what it reads through the API.

Names are user data: the script builds the page with DOM text nodes, never from HTML,
and the Content-Security-Policy lets nothing but these files run or load."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from pathkeeper.http.deps import public

router = APIRouter(include_in_schema=False)

#: Only the service's own files; data from the service only; no inline script or style.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidated on every load: an upgraded service serves its own script at once.
    "Cache-Control": "no-store",
}


@cache
def asset(name: str) -> bytes:
    """A file of the page, from the installed package."""
    return (files("pathkeeper.http") / "static" / name).read_bytes()


def _serve(name: str, media_type: str) -> Response:
    return Response(asset(name), media_type=media_type, headers=HEADERS)


@router.get("/ui", dependencies=[Depends(public)])
async def operator_page() -> Response:
    return _serve("ui.html", "text/html; charset=utf-8")


@router.get("/ui/app.js", dependencies=[Depends(public)])
async def operator_script() -> Response:
    return _serve("app.js", "text/javascript; charset=utf-8")


@router.get("/ui/app.css", dependencies=[Depends(public)])
async def operator_style() -> Response:
    return _serve("app.css", "text/css; charset=utf-8")
