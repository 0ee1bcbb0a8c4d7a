"""Opening a client of the search server from an operator's URL."""

from __future__ import annotations

from typing import Any

from elasticsearch import Elasticsearch

from coordinator.errors import InvalidConfiguration


def open_search(url: str, **options: Any) -> Elasticsearch:
    """An ``Elasticsearch`` client, or ``InvalidConfiguration`` for a URL it cannot use
    (the client raises a bare ValueError)."""
    try:
        return Elasticsearch(url, **options)
    except ValueError:
        # Not the client's message: it repeats the URL, which may hold a password.
        raise InvalidConfiguration(
            "the search server URL cannot be parsed; expected http(s)://host:port"
        ) from None
