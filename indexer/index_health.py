"""Whether the alias the worker writes through is there, as a log line and the
``pathkeeper_indexer_index_missing`` gauge, and whether the writers' content limit
fits in one request to the search server."""

from __future__ import annotations

import logging

from . import metrics
from .bulk import BulkStats
from .elasticsearch_index import (
    alias_targets,
    content_limit_problem,
    missing_alias_message,
    our_indices,
    request_limit,
)
from .logs import log
from .search_engine import SearchEngine, SearchRefused

logger = logging.getLogger("pathkeeper.indexer")


class IndexHealth:
    """One worker's view of its alias (``consumer`` labels the gauge)."""

    def __init__(self, es: SearchEngine, alias: str, consumer: str) -> None:
        self.es = es
        self.alias = alias
        self.consumer = consumer

    def check_request_limit(self, max_content_bytes: int) -> None:
        """Warn when a file the writers accept may not fit in one request to the search
        server. A server that does not let us read its settings only gets a note."""
        try:
            limit = request_limit(self.es)
        except SearchRefused as exc:
            log(logger, logging.WARNING, "search_server_limit_unknown",
                error=f"{type(exc).__name__}: {exc}")
            return
        problem = content_limit_problem(limit, max_content_bytes)
        if problem is not None:
            log(logger, logging.WARNING, "content_limit_exceeds_search_server",
                max_content_bytes=max_content_bytes,
                search_server_limit=limit, problem=problem)

    def index_answered(self, stats: BulkStats) -> None:
        """A bulk request through the alias had items answered: the alias exists (writes
        require it, and a missing one fails the request), so the gauge goes back to 0
        even when the failure it recovered from was seen by a step that does not write."""
        if stats.answered:
            metrics.INDEX_MISSING.labels(self.consumer).set(0)

    def check_index(self) -> None:
        """After a failed batch: is the alias gone? Then say so, loudly and as a metric,
        and keep retrying without recreating it (see ``IndexMissing``): writes go to
        the alias only, so nothing is applied or checkpointed until a rebuild puts it
        back. A search server that does not answer is the batch error's to report."""
        alias = self.alias
        try:
            if alias_targets(self.es, alias):
                metrics.INDEX_MISSING.labels(self.consumer).set(0)
                return
            message = missing_alias_message(alias, True, our_indices(self.es, alias))
        except Exception as exc:
            log(logger, logging.DEBUG, "index_check_failed", error=str(exc))
            return
        metrics.INDEX_MISSING.labels(self.consumer).set(1)
        log(logger, logging.ERROR, "index_missing", alias=alias, error=message)
