"""Loading a rebuild's documents into the search server: the half-built indices of a
killed run, the new index marked as building, the bulk load and what it had to leave
out (documents larger than one request), recorded as dead letters."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Engine

from . import bulk, deadletters, elasticsearch_index
from .bulk import Alive, Rejected, resolve_conflicts, stream_answers
from .contract import DEFAULT_SHAPE, IndexShape
from .errors import ReplayError
from .progress import Progress
from .search_engine import SearchEngine

log = logging.getLogger("pathkeeper.replay")

BULK_CHUNK = 2000
BULK_BYTES = 10 * 1024 * 1024  # Elastic's advice: a few MB to tens of MB per request


def cleanup_abandoned(es: SearchEngine, alias: str) -> list[str]:
    """Delete the indices a killed rebuild of ``alias`` left (marked ``alias-building``).

    Only call while holding the lease: then no living process is building them.
    """
    doomed = elasticsearch_index.abandoned_indices(es, alias)
    for index in doomed:
        log.warning("deleting %s, left half-built by an earlier rebuild of %s", index, alias)
        es.delete_index(index)
    return doomed


def create_building_index(
    es: SearchEngine, alias: str, name: str, shape: IndexShape = DEFAULT_SHAPE
) -> str:
    """Create ``name`` of ``shape`` for loading, marked as building
    (``elasticsearch_index``); ``ReplayError`` if it appeared meanwhile."""
    if not elasticsearch_index.create_building_index(es, alias, name, shape):
        raise ReplayError(f"index {name} appeared while we created it")
    return name


def bulk_index(
    es: SearchEngine,
    actions: Iterable[dict[str, Any]],
    progress: Progress,
    *,
    alive: Alive | None = None,
    too_large: list[Rejected] | None = None,
) -> tuple[int, int]:
    """Stream ``actions`` through the bulk helper; returns (written, version conflicts).

    With ``alive``, a version conflict is judged as the worker judges it
    (``bulk.resolve_conflicts``): a document edited or deleted by hand is written
    anyway and counted as written; one at least as new stays and is counted as a
    conflict. A document larger than the search server takes in one request can never
    be written: it is left out and added to ``too_large`` (``indexer.bulk``; the caller
    reports it). Any other failure raises ``ReplayError`` (a rebuild must not be swapped
    in with holes)."""
    ok = conflicts = 0
    conflicting: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []

    def settle() -> None:
        nonlocal ok, conflicts
        replaced = resolve_conflicts(es, conflicting, alive=alive)
        ok += sum(replaced)
        conflicts += len(replaced) - sum(replaced)
        conflicting.clear()

    for answer in stream_answers(
        es, actions, refused, chunk_size=BULK_CHUNK, max_chunk_bytes=BULK_BYTES,
        max_retries=5, initial_backoff=0.5, max_backoff=10,
    ):
        indexed, deleted, failed = answer.tally()
        ok += indexed + deleted
        for action, op, item in failed:
            if item.get("status") == 409 and alive is not None:
                conflicting.append(action)
                if len(conflicting) >= BULK_CHUNK:
                    settle()
            elif item.get("status") == 404 and op == "delete":
                ok += 1  # deleting what is not there: the goal is reached
            else:
                raise ReplayError(f"bulk write failed: {({op: item})}")
        progress.advance(len(answer.actions))
        progress.advance(_left_out(refused, too_large))
    progress.advance(_left_out(refused, too_large))
    settle()
    return ok, conflicts


def _left_out(refused: list[dict[str, Any]], into: list[Rejected] | None) -> int:
    """Move the actions no request could carry from ``refused`` into ``into`` (as
    rejections); how many. Without ``into``, a rebuild cannot leave one out: error."""
    n = len(refused)
    for action in refused:
        rejected = bulk.too_large(action)
        if into is None:
            raise ReplayError(f"bulk write failed: {rejected.node_id}: {rejected.error}")
        log.warning("left out %s %s: %s", rejected.namespace, rejected.node_id, rejected.error)
        into.append(rejected)
    refused.clear()
    return n


def record_left_out(engine: Engine, consumer: str, too_large: list[Rejected]) -> None:
    """Record the documents a rebuild left out as dead letters of the live ``consumer``
    (once a node: the worker may have recorded it already), so ``indexer dead-letters``
    lists them and ``--retry`` writes them once the search server takes them."""
    for rejected in too_large:
        deadletters.record(engine, consumer, rejected, once=True)
