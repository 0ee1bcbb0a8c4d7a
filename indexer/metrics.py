"""Prometheus metrics of the indexer worker (served on ``--metrics-port``).

Labelled by consumer and partition; lag gauges are refreshed by the worker's
periodic job from the same query as ``pathkeeper indexer status``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram, start_http_server

if TYPE_CHECKING:
    from .bulk import BulkStats

EVENTS_APPLIED = Counter(
    "pathkeeper_indexer_events_applied_total", "Events applied to Elasticsearch",
    ["consumer", "partition"],
)
DOCUMENTS = Counter(
    "pathkeeper_indexer_documents_total",
    "Bulk actions by outcome (indexed, deleted, already_newer, rejected, overridden: a "
    "document edited outside the indexer, replaced by compare-and-swap)",
    ["consumer", "outcome"],
)
DEAD_LETTERS = Counter(
    "pathkeeper_indexer_dead_letters_total", "Documents rejected for good", ["consumer"]
)
TOO_LARGE = Counter(
    "pathkeeper_indexer_documents_too_large_total",
    "Documents larger than the search server takes in one request "
    "(http.max_content_length): dead-lettered, counted in dead_letters_total too",
    ["consumer"],
)
DEAD_LETTERS_PENDING = Gauge(
    "pathkeeper_indexer_dead_letters_pending", "Dead letters not yet retried", ["consumer"]
)
INDEX_MISSING = Gauge(
    "pathkeeper_indexer_index_missing",
    "1 while the alias is missing although documents were indexed (run pathkeeper reindex)",
    ["consumer"],
)
BATCH_RETRIES = Counter(
    "pathkeeper_indexer_batch_retries_total", "Batches retried after an error",
    ["consumer", "partition"],
)
BATCH_SECONDS = Histogram(
    "pathkeeper_indexer_batch_seconds", "Time to apply one batch", ["consumer"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
CHECKPOINT = Gauge(
    "pathkeeper_indexer_checkpoint", "Last checkpointed event position",
    ["consumer", "partition"],
)
LAG_EVENTS = Gauge(
    "pathkeeper_indexer_lag_events", "Committed events not yet applied",
    ["consumer", "partition"],
)
LAG_SECONDS = Gauge(
    "pathkeeper_indexer_lag_seconds", "Age of the oldest committed event not yet applied",
    ["consumer", "partition"],
)
READ_WAITING = Gauge(
    "pathkeeper_indexer_read_waiting_seconds",
    "How long the partition's log reader has been held back by event log writers in "
    "flight (0 when it is not; set once a wait lasts read_report_after seconds)",
    ["consumer", "partition"],
)
READ_BLOCKER_AGE = Gauge(
    "pathkeeper_indexer_read_blocker_age_seconds",
    "An event log writer in flight that holds the log reader back, by backend pid "
    "(prepared transactions: 'prepared:<gid>') and database: how long its transaction "
    "has been open. Present only while it blocks.",
    ["consumer", "pid", "database"],
)
PARTITIONS_HELD = Gauge(
    "pathkeeper_indexer_partitions_held", "Partitions this process holds", ["consumer"]
)


def count_documents(consumer: str, stats: BulkStats) -> None:
    """Add one request's outcomes to ``DOCUMENTS``."""
    for outcome in ("indexed", "deleted", "already_newer", "rejected", "overridden"):
        n = getattr(stats, outcome)
        if n:
            DOCUMENTS.labels(consumer, outcome).inc(n)


def serve(port: int) -> Callable[[], None]:
    """Expose the metrics over HTTP on ``port`` (a daemon thread); returns a function
    that stops serving."""
    server, thread = start_http_server(port)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(5)

    return stop
