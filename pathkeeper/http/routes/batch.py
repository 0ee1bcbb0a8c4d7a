"""Several commands on one namespace, atomically: ``Coordinator.apply`` over HTTP."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from coordinator.api import apply_group
from coordinator.results import MutationResult
from pathkeeper.http.deps import CoordDep, IdempotencyHeader, NsParam, SettingsDep, Writer
from pathkeeper.http.errors import ServiceError
from pathkeeper.http.idempotency import replayable_response, request_hash, run_idempotent
from pathkeeper.http.operations import NAMESPACE_URL
from pathkeeper.http.schemas import BatchIn, BatchOut, MutationOut
from pathkeeper.http.threads import blocking

router = APIRouter(tags=["batch"])


@router.post(f"{NAMESPACE_URL}/batch", response_model=BatchOut)
@blocking
def batch(request: Request, ns: NsParam, body: BatchIn, who: Writer, coord: CoordDep,
          settings: SettingsDep, idempotency_key: IdempotencyHeader = None) -> JSONResponse:
    """Apply the operations atomically, in order: every result, or the first error with
    its ``index`` and nothing applied."""
    commands = body.commands()
    max_ops = coord.settings.max_group_ops
    if len(commands) > max_ops:
        raise ServiceError(413, "too_large", f"at most {max_ops} operations per batch")

    def answer(results: list[MutationResult]) -> tuple[int, dict[str, Any]]:
        out = BatchOut(results=[MutationOut.of(r) for r in results])
        return 200, out.model_dump(mode="json")

    digest = request_hash(request.method, request.url.path, dict(request.query_params),
                          None, body.model_dump(mode="json"))
    outcome = run_idempotent(
        coord, ns, idempotency_key, who.key_id, digest, settings.idempotency_ttl_seconds,
        lambda uow: apply_group(uow, commands, max_ops), answer,
    )
    return replayable_response(outcome)
