"""Sending bulk actions to Elasticsearch and sorting out what each answer means.

Per item (the official ``streaming_bulk`` helper, ``raise_on_error=False``):

* 2xx: applied;
* 409 version conflict: the stored document is as new or newer: already applied;
* 404 on a delete without an error: the document was not there: nothing to do
  (the tombstone is still written);
* 429 or 5xx, or a missing index: transient: ``Retryable`` is raised and the whole
  batch is retried later (writes are idempotent);
* any other 4xx: the document can never be applied (e.g. rejected by the
  mapping): handed to ``on_reject`` (the dead-letter table) and the batch goes on.

A transport error or an error answer to the whole request propagates to the
caller, which retries the batch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from elasticsearch import Elasticsearch
from elasticsearch.helpers import streaming_bulk

CHUNK_ACTIONS = 1000
CHUNK_BYTES = 8 * 1024 * 1024


class Retryable(Exception):
    """Elasticsearch refused part of a batch for a reason that may pass (overload,
    server error, index missing): retry the whole batch later."""


@dataclass(frozen=True)
class Rejected:
    """One action Elasticsearch will never accept as it is."""

    namespace: str
    node_id: str
    version: int
    status: int
    error: str
    document: dict[str, Any] | None


@dataclass
class BulkStats:
    indexed: int = 0
    deleted: int = 0
    already_newer: int = 0
    rejected: int = 0

    def __iadd__(self, other: BulkStats) -> BulkStats:
        self.indexed += other.indexed
        self.deleted += other.deleted
        self.already_newer += other.already_newer
        self.rejected += other.rejected
        return self

    @property
    def total(self) -> int:
        return self.indexed + self.deleted + self.already_newer + self.rejected


def _error_text(info: dict[str, Any]) -> str:
    err = info.get("error")
    if isinstance(err, dict):
        return f"{err.get('type')}: {err.get('reason')}"
    return str(err)


def send(
    es: Elasticsearch,
    actions: Iterable[dict[str, Any]],
    on_reject: Callable[[Rejected], None],
    *,
    chunk_size: int = CHUNK_ACTIONS,
    max_chunk_bytes: int = CHUNK_BYTES,
) -> BulkStats:
    """Send ``actions`` in chunks; returns what happened to them (see module docstring).

    Raises ``Retryable`` on the first transient per-item failure.
    """
    stats = BulkStats()
    # Answers come back in the order the actions went out; keep the ones in flight
    # (at most about one chunk) to know what a failed answer was about.
    in_flight: deque[dict[str, Any]] = deque()

    def feed() -> Iterator[dict[str, Any]]:
        for action in actions:
            in_flight.append(action)
            yield action

    for ok, item in streaming_bulk(
        es, feed(), chunk_size=chunk_size, max_chunk_bytes=max_chunk_bytes,
        raise_on_error=False, raise_on_exception=True, max_retries=0,
        # Fail (and retry) rather than auto-create a concrete index named like the alias.
        require_alias=True,
    ):
        action = in_flight.popleft()
        op, info = next(iter(item.items()))
        status = int(info.get("status", 500))
        if ok:
            if op == "delete":
                stats.deleted += 1
            else:
                stats.indexed += 1
        elif status == 409:
            stats.already_newer += 1
        elif op == "delete" and status == 404 and "error" not in info:
            stats.deleted += 1
        elif status == 429 or status >= 500 or (
            isinstance(info.get("error"), dict)
            and info["error"].get("type") == "index_not_found_exception"
        ):
            # Stop at once: the rest of the batch is sent again on the retry anyway.
            raise Retryable(f"Elasticsearch refused part of a batch: {status} {_error_text(info)}")
        else:
            stats.rejected += 1
            on_reject(
                Rejected(
                    namespace=str(action.get("routing", "")),
                    node_id=str(action["_id"]),
                    version=int(action["version"]),
                    status=status,
                    error=_error_text(info),
                    document=action.get("_source"),
                )
            )
    return stats
