"""Idempotency keys: a retried mutation returns the original answer instead of applying twice.

The row ``(namespace, key)`` is inserted FIRST in the mutation's own transaction
and filled with the answer at its end, so it commits or rolls back with the change:

* a retry after completion finds the committed row and replays its answer;
* a duplicate sent while the first is still running blocks on the uncommitted
  unique-key entry (bounded by ``lock_timeout``, then 409 ``conflict``); when the
  first commits, the duplicate's ``INSERT ... ON CONFLICT`` sees the row, and it
  replays the stored answer, so the change applies once; when the first rolls
  back (it failed), the duplicate proceeds and runs the request itself;
* a failed request stores nothing (its transaction rolled back): retrying it runs
  it again, which is safe because it changed nothing;
* the same key with a different request (method, path, query, If-Match, body) is
  refused with 422 ``idempotency_key_reused``.

Keys are scoped by API key (two clients cannot collide or read each other's
answers) and expire after ``ttl`` seconds: an expired row is taken over by the
next request with that key, and ``purge`` deletes expired rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Engine, text

from .api import Coordinator
from .errors import IdempotencyKeyReused
from .retries import Retry
from .unit_of_work import UnitOfWork

KEY_CLAIM_SQL = text(
    """
    INSERT INTO idempotency_keys (namespace, key, request_hash, status, response, expires_at)
    VALUES (:ns, :key, :hash, 0, '{}'::jsonb, now() + make_interval(secs => :ttl))
    ON CONFLICT (namespace, key) DO UPDATE
        SET request_hash = EXCLUDED.request_hash, status = 0, response = '{}'::jsonb,
            created_at = now(), expires_at = EXCLUDED.expires_at
        WHERE idempotency_keys.expires_at <= now()
    RETURNING 1
    """
)

STORE_SQL = text(
    "UPDATE idempotency_keys SET status = :status, "
    "response = CAST(:response AS jsonb) WHERE namespace = :ns AND key = :key"
)

REPLAY_SQL = text(
    "SELECT request_hash, status, response FROM idempotency_keys "
    "WHERE namespace = :ns AND key = :key"
)

R = TypeVar("R")


@dataclass(frozen=True)
class Outcome:
    """An answer (a status and a JSON body), and whether it is a stored one replayed."""

    status: int
    body: dict[str, Any]
    replayed: bool


def run_once(
    coord: Coordinator,
    ns: str,
    key: str | None,
    digest: str,
    ttl_seconds: float,
    work: Callable[[UnitOfWork], R],
    answer: Callable[[R], tuple[int, dict[str, Any]]],
) -> Outcome:
    """Run ``work`` in one transaction on ``ns`` and answer ``answer(result)`` (status,
    JSON body); with a key, record that answer in the same transaction, or replay the
    answer recorded by an earlier request with the key (``IdempotencyKeyReused`` if
    that request's ``digest`` differs).

    The answer is made and stored by a hook of the unit of work, which runs once the
    change's events have their positions, so it carries ``seq``."""

    def body(uow: UnitOfWork) -> list[Outcome]:
        if key is not None:
            params = {"ns": ns, "key": key, "hash": digest, "ttl": ttl_seconds}
            if uow.conn.execute(KEY_CLAIM_SQL, params).first() is None:
                return [_replay(uow, ns, key, digest)]
        result = work(uow)
        made: list[Outcome] = []

        def record() -> None:
            status, payload = answer(result)
            if key is not None:
                uow.conn.execute(STORE_SQL, {
                    "ns": ns, "key": key, "status": status,
                    "response": json.dumps(payload, ensure_ascii=False),
                })
            made.append(Outcome(status, payload, False))

        uow.after_events(record)
        return made

    return coord.run(ns, body)[0]


def _replay(uow: UnitOfWork, ns: str, key: str, digest: str) -> Outcome:
    # READ COMMITTED: this new statement sees the row the conflicting writer committed.
    row = uow.conn.execute(REPLAY_SQL, {"ns": ns, "key": key}).one_or_none()
    if row is None:  # purged between the two statements: start over
        raise Retry()
    if row.request_hash != digest:
        raise IdempotencyKeyReused("this Idempotency-Key was used for a different request")
    return Outcome(int(row.status), dict(row.response), True)


def purge(engine: Engine, batch: int = 10_000) -> int:
    """Delete expired rows; returns how many."""
    total = 0
    while True:
        with engine.begin() as conn:
            n = conn.execute(
                text(
                    "DELETE FROM idempotency_keys WHERE ctid = ANY(ARRAY("
                    "SELECT ctid FROM idempotency_keys WHERE expires_at <= now() LIMIT :n))"
                ),
                {"n": batch},
            ).rowcount
        total += n
        if n < batch:
            return total
