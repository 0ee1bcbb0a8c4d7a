"""Applying one batch of events to Elasticsearch: the heart of the indexer.

"Events say WHAT changed; PostgreSQL says what it IS now."

For a batch read with ``read_events(after=checkpoint)`` and its cursor ``C``
(every event ``<= C`` has committed, none above it was read), let ``V`` be the
position of the batch's last event. The applier opens ONE REPEATABLE READ
transaction; its snapshot is taken after ``read_events`` returned, so it
contains every change ``<= C`` (and maybe some later ones). From that snapshot
it writes, with ``version_type=external, version=V`` and ``seq = V``:

* each node an event names (created, written, moved, deleted): its current row
  and path, or a ``delete`` if the row is gone;
* for each moved directory: its whole current subtree, streamed from a
  server-side cursor (this rewrites ``path`` of every descendant);
* then, if the batch deleted a directory recursively, moved a directory, or
  dropped a namespace: it refreshes the index (search is near-real-time) and
  sweeps the documents under the deleted path / the old path / the whole
  namespace whose ``seq < V`` (written by an older batch, not rewritten by this
  one); each is rewritten from its current row or deleted if gone. This finds
  the descendants of deleted subtrees, which PostgreSQL no longer has (and the
  documents of a subtree moved and then deleted within one batch, which still
  carry the old path).

``V`` rather than ``C`` (the lead's first sketch): both work, as every later
batch's events, hence its ``V``, are above ``C``; but ``V`` depends only on the
batch's events, so a batch read again after a crash keeps its version and the
documents already written answer 409 instead of being rewritten (a restarted
100,000-descendant rename resumes instead of starting over).

Why this is safe:

* Every write carries ``V``. A later batch has a larger ``V`` and a snapshot at
  least as new, and Elasticsearch keeps an external-versioned write only if its
  version is greater than the stored one: a document never goes backwards, even
  if two workers briefly apply the same partition.
* Re-applying a batch after a crash rewrites the same or newer state at the same
  version: idempotent. A 409 version conflict means "newer already there".
* Deleted, then recreated: node ids are UUIDs never reused, so a recreated path
  is a new document. A delete leaves a tombstone (with its version) that rejects
  older writes for ``index.gc_deletes``; we set it to 1 h (``indexer.mapping``)
  and abandon any batch attempt older than ``MAX_BATCH_AGE`` (30 min), so a write
  from a stale snapshot can never outlive the tombstone it must lose against.
* The checkpoint moves to ``C`` only after Elasticsearch acknowledged every
  action of the batch (``indexer.worker``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from elasticsearch import Elasticsearch
from sqlalchemy import Connection, Engine

from coordinator import Event, Node

from .bulk import BulkStats, Rejected, send
from .documents import delete_action, index_action, is_indexed
from .mapping import MAX_BATCH_AGE, subtree_filter
from .plan import BatchPlan, plan_batch
from .snapshot import fetch_nodes, stream_subtree

ID_CHUNK = 1000
SWEEP_PAGE = 1000


class Abandoned(Exception):
    """The batch was given up (shutdown requested, or too old): not applied, not
    checkpointed; applying it again later is safe."""


@dataclass
class BatchResult:
    events: int
    version: int
    stats: BulkStats
    swept: bool
    seconds: float


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _outermost(tops: Iterable[Node]) -> list[Node]:
    """Subtree roots that are not inside another one (their rewrite covers them)."""
    kept: list[Node] = []
    for node in sorted(tops, key=lambda n: n.path):
        if not any(node.path.startswith(k.path.rstrip("/") + "/") for k in kept):
            kept.append(node)
    return kept


class Applier:
    """Applies batches for one consumer to the index behind ``alias``. Thread-safe
    (one batch per call; share it between partition runners)."""

    def __init__(
        self,
        engine: Engine,
        es: Elasticsearch,
        alias: str,
        on_reject: Any,
        *,
        chunk_size: int = 1000,
        stream_chunk: int = 1000,
    ) -> None:
        self.engine = engine
        self.es = es
        self.alias = alias
        self.on_reject = on_reject
        self.chunk_size = chunk_size
        self.stream_chunk = stream_chunk

    def apply(
        self, events: list[Event], version: int, stop: threading.Event | None = None
    ) -> BatchResult:
        """Apply ``events`` (one batch) at external version ``version`` (the position of
        its last event).

        Raises ``Abandoned`` if ``stop`` is set meanwhile, and lets errors of
        PostgreSQL or Elasticsearch through; either way nothing needs undoing, and
        the caller simply applies the batch again later.
        """
        started = time.monotonic()
        plan = plan_batch(events)

        def check() -> None:
            if stop is not None and stop.is_set():
                raise Abandoned("shutting down")
            if time.monotonic() - started > MAX_BATCH_AGE:
                raise Abandoned("batch attempt older than MAX_BATCH_AGE")

        with self.engine.connect() as raw:
            conn = raw.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                stats = self._send(self._actions(conn, plan, version, check))
                if plan.needs_sweep:
                    check()
                    # A search sees only refreshed writes: make this batch's visible.
                    self.es.indices.refresh(index=self.alias)
                    stats += self._send(self._sweep_actions(conn, plan, version, check))
        return BatchResult(
            len(events), version, stats, plan.needs_sweep, time.monotonic() - started
        )

    def _send(self, actions: Iterable[dict[str, Any]]) -> BulkStats:
        def reject(r: Rejected) -> None:
            self.on_reject(r)

        return send(self.es, actions, reject, chunk_size=self.chunk_size)

    def _write_or_delete(
        self, ns: str, ids: list[str], found: dict[str, Node], version: int
    ) -> Iterator[dict[str, Any]]:
        for node_id in ids:
            node = found.get(node_id)
            if node is None:
                yield delete_action(self.alias, ns, node_id, version)
            elif is_indexed(node):
                yield index_action(self.alias, node, version)

    def _actions(
        self, conn: Connection, plan: BatchPlan, version: int, check: Any
    ) -> Iterator[dict[str, Any]]:
        for ns, p in plan.namespaces.items():
            for ids in _chunks(sorted(p.nodes), ID_CHUNK):
                check()
                yield from self._write_or_delete(ns, ids, fetch_nodes(conn, ns, ids), version)
            if not p.subtrees:
                continue
            tops = fetch_nodes(conn, ns, sorted(p.subtrees))  # gone ones: covered by sweeps
            for top in _outermost(tops.values()):
                for i, node in enumerate(stream_subtree(conn, top, self.stream_chunk)):
                    if i % self.stream_chunk == 0:
                        check()
                    if node.id not in p.nodes and is_indexed(node):
                        yield index_action(self.alias, node, version)

    def _sweep_actions(
        self, conn: Connection, plan: BatchPlan, version: int, check: Any
    ) -> Iterator[dict[str, Any]]:
        for ns, p in plan.namespaces.items():
            for path in sorted(p.sweeps):
                for ids in self._older_docs_under(ns, path, version):
                    check()
                    yield from self._write_or_delete(ns, ids, fetch_nodes(conn, ns, ids), version)

    def _older_docs_under(self, ns: str, path: str, version: int) -> Iterator[list[str]]:
        """Ids of documents of ``ns`` at or under ``path`` with ``seq < version``, a page
        at a time (search_after on the unique node_id: stable while we rewrite them)."""
        filters: list[dict[str, Any]] = [
            {"term": {"namespace": ns}},
            {"range": {"seq": {"lt": version}}},
        ]
        under = subtree_filter(path)
        if under is not None:
            filters.append(under)
        after: list[Any] | None = None
        while True:
            resp = self.es.search(
                index=self.alias,
                routing=ns,
                query={"bool": {"filter": filters}},
                sort=[{"node_id": "asc"}],
                size=SWEEP_PAGE,
                source=False,
                track_total_hits=False,
                search_after=after,
            )
            hits = resp["hits"]["hits"]
            if not hits:
                return
            yield [str(h["_id"]) for h in hits]
            if len(hits) < SWEEP_PAGE:
                return
            after = hits[-1]["sort"]
