"""The local search server of tests, the demo and benchmarks: real Elasticsearch by
default, noida-db (a fast stand-in, and the choice on machines without Java) when
``PATHKEEPER_SEARCH=noida``.

``ES_URL`` is not read here: callers that accept an external cluster check it first
and start a local server only without one.
"""

from __future__ import annotations

import os
from pathlib import Path

from pathkeeper.local.elasticsearch import LocalElasticsearch
from pathkeeper.local.noida import LocalNoida
from pathkeeper.local.server import LocalServer, LocalServerError

SEARCH_ENV = "PATHKEEPER_SEARCH"
KINDS = ("elasticsearch", "noida")


def search_kind() -> str:
    """Which local server to start (``PATHKEEPER_SEARCH``, default elasticsearch)."""
    kind = os.environ.get(SEARCH_ENV, "elasticsearch").strip().lower() or "elasticsearch"
    if kind not in KINDS:
        raise LocalServerError(f"{SEARCH_ENV}={kind!r}: expected one of {', '.join(KINDS)}")
    return kind


def new_local_search(data_dir: str | Path | None = None, port: int = 0) -> LocalServer:
    """A local search server of the configured kind, not yet started."""
    if search_kind() == "noida":
        return LocalNoida(data_dir, port)
    return LocalElasticsearch(data_dir, port)


__all__ = ["LocalServer", "LocalServerError", "new_local_search", "search_kind"]
