"""The indexer's error root, and the errors that several of its modules raise."""

from __future__ import annotations


class IndexerError(Exception):
    """The root of every error the indexer raises on purpose (replication, rebuilds,
    retention, the search seam): a caller that handles the indexer's failures catches
    this. Errors of the database it reads are the coordinator's (``CoordinatorError``)."""


class ReplayError(IndexerError):
    """A replay, reindex or verify could not be done (the message says why)."""
