"""The indexer's errors that several of its modules raise."""

from __future__ import annotations


class ReplayError(Exception):
    """A replay, reindex or verify could not be done (the message says why)."""
