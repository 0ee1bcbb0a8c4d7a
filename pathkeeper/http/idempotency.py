"""Idempotency-Key over HTTP: what makes two requests the same request, which keys are
acceptable, and whose they are. The semantics (claim first, answer stored in the
change's own transaction, replay, expiry) are ``coordinator.idempotency``'s.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from fastapi.responses import JSONResponse

from coordinator.api import Coordinator
from coordinator.idempotency import Outcome, run_once
from coordinator.unit_of_work import UnitOfWork
from pathkeeper.http.errors import ServiceError

MAX_KEY_LENGTH = 200

R = TypeVar("R")


def request_hash(method: str, path: str, query: Mapping[str, str], if_match: str | None,
                 payload: Any) -> str:
    """A digest of everything that makes two requests the same request."""
    canonical = json.dumps(
        [method.upper(), path, sorted(query.items()), if_match, payload],
        sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def check_key(key: str) -> str:
    if not (0 < len(key) <= MAX_KEY_LENGTH) or not key.isprintable():
        raise ServiceError(
            422, "invalid_request",
            f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} printable characters",
        )
    return key


def run_idempotent(
    coord: Coordinator,
    ns: str,
    key: str | None,
    owner: str,
    digest: str,
    ttl_seconds: float,
    work: Callable[[UnitOfWork], R],
    answer: Callable[[R], tuple[int, dict[str, Any]]],
) -> Outcome:
    """``coordinator.idempotency.run_once`` with the request's key, checked and scoped by
    API key ``owner`` (two clients cannot collide or read each other's answers)."""
    stored_key = f"{owner}:{check_key(key)}" if key is not None else None
    return run_once(coord, ns, stored_key, digest, ttl_seconds, work, answer)


def replayable_response(outcome: Outcome) -> JSONResponse:
    """The answer; a replayed one says so (``Idempotent-Replayed: true``)."""
    headers = {"Idempotent-Replayed": "true"} if outcome.replayed else None
    return JSONResponse(outcome.body, outcome.status, headers=headers)
