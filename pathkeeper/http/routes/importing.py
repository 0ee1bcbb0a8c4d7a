"""Importing a tree from JSON Lines, streamed."""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio.from_thread
import anyio.to_thread
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from coordinator.importer import import_timed_out, iter_lines
from pathkeeper.http.deps import WRITE, CoordDep, NsParam, SettingsDep
from pathkeeper.http.operations import NAMESPACE_URL
from pathkeeper.http.schemas import ImportOut

router = APIRouter(tags=["import"])


@router.post(f"{NAMESPACE_URL}/import", response_model=ImportOut, status_code=201,
             dependencies=[Depends(WRITE)],
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/x-ndjson": {"schema": {"type": "string"}}}}})
async def import_nodes(request: Request, ns: NsParam, coord: CoordDep,
                       settings: SettingsDep) -> JSONResponse:
    """Import JSON Lines (one node a line: ``{"path", "kind", "content", "metadata"}``,
    any order, missing parents created), streamed: the body is read as it arrives,
    never held whole, one line at a time (a line longer than the coordinator's
    ``max_import_line_bytes`` is refused with 413 once that much of it arrived). All or
    nothing; bad lines are listed with their numbers. The import has its own timeout
    (``import_timeout_seconds``, upload included: 503 with Retry-After, nothing
    written); an upload that stalls is ended by the service's body timeout
    (``body_timeout_seconds`` between two chunks: 408, see ``limits.py``)."""
    body = request.stream().__aiter__()
    timeout = settings.import_timeout_seconds
    deadline = time.monotonic() + timeout

    async def next_chunk() -> bytes:
        left = deadline - time.monotonic()
        if left <= 0:
            raise import_timed_out(timeout)
        try:
            with anyio.fail_after(left):
                return await body.__anext__()
        except TimeoutError:
            raise import_timed_out(timeout) from None

    def chunks() -> Iterator[bytes]:
        # Runs in the worker thread: each chunk is awaited on the event loop, so the
        # client is read only as fast as the import consumes it.
        while True:
            try:
                yield anyio.from_thread.run(next_chunk)
            except StopAsyncIteration:
                return

    result = await anyio.to_thread.run_sync(
        lambda: coord.import_nodes(
            ns, iter_lines(chunks(), coord.settings.max_import_line_bytes), timeout=timeout)
    )
    out = ImportOut(
        namespace=result.namespace, lines=result.lines, created=result.created,
        implied_dirs=result.implied_dirs, first_seq=result.first_seq,
        last_seq=result.last_seq, seconds=round(result.seconds, 3),
    )
    return JSONResponse(out.model_dump(mode="json"), 201)
