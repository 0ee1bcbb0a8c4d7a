"""A ceiling for renames over HTTP: the same rename behind a bare ASGI app, sent the way
the service's lane sends it (``AsyncStatements``, on the event loop), with no framework,
no limits, no validation beyond what the rename needs.

    uvicorn bare_rename_app:app --workers 2   (PATHKEEPER_DATABASE_URL in the environment)

``bench_http.py --bare`` serves it beside ``pathkeeper serve`` in the same run: what is
left between the two is what our HTTP layer costs; what is left between this one and
the in-process rename is uvicorn's share and the asyncio driver's, which any Python
server pays. ``POST /v1/namespaces/{ns}/node/rename
?path=...`` with ``{"name": ...}`` and a bearer key (looked up as the service does);
``GET /healthz`` answers 200. Not a server to deploy: no error is answered with care.
"""

from __future__ import annotations

import asyncio
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qsl

from coordinator import Coordinator
from coordinator.async_statements import AsyncStatements
from coordinator.commands import Rename
from pathkeeper.http.auth import Authenticator
from pathkeeper.http.schemas import MutationOut

_coord = Coordinator.connect(os.environ["PATHKEEPER_DATABASE_URL"], pool_size=30,
                             max_overflow=0)
_auth = Authenticator(_coord.engine, 5.0)
_statements = AsyncStatements(os.environ["PATHKEEPER_DATABASE_URL"], _coord.settings,
                              wake=_coord.wake_indexer)


async def _lifespan(receive: Any, send: Any) -> None:
    await receive()  # startup
    # As the service's lifespan does: a thread for every request in flight.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(64))
    await _statements.open()
    await send({"type": "lifespan.startup.complete"})
    await receive()  # shutdown
    await _statements.close()
    _coord.close()
    await send({"type": "lifespan.shutdown.complete"})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    status, out = 200, b'{"status":"ok"}'
    if scope["method"] == "POST":
        loop = asyncio.get_running_loop()
        header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        who = _auth.cached(header)
        if who is None:
            who = await loop.run_in_executor(None, _auth.authenticate, header)
        ns = scope["path"].split("/")[3]
        who.require(ns, "write")
        path = dict(parse_qsl(scope["query_string"].decode("latin-1")))["path"]
        statement = _statements.statement(ns, Rename(path, json.loads(body)["name"]))
        assert statement is not None
        result = await _statements.execute(statement)
        out = MutationOut.of(result).model_dump_json().encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]})
    await send({"type": "http.response.body", "body": out})
