"""The local search server of tests, the demo and benchmarks: a real node (Elasticsearch
by default, OpenSearch with ``PATHKEEPER_SEARCH=opensearch``; the version from
``PATHKEEPER_SEARCH_VERSION``, else the engine's default), or noida-db (a fast stand-in,
and the choice on machines without Java) with ``PATHKEEPER_SEARCH=noida``.

``ES_URL`` is not read here: callers that accept an external cluster check it first
and start a local server only without one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pathkeeper.local.noida import LocalNoida
from pathkeeper.local.search_node import ENGINES, LocalSearchNode
from pathkeeper.local.server import LocalServer, LocalServerError

SEARCH_ENV = "PATHKEEPER_SEARCH"
VERSION_ENV = "PATHKEEPER_SEARCH_VERSION"
KINDS = (*ENGINES, "noida")


def search_kind() -> str:
    """Which local server to start (``PATHKEEPER_SEARCH``, default elasticsearch)."""
    kind = os.environ.get(SEARCH_ENV, "elasticsearch").strip().lower() or "elasticsearch"
    if kind not in KINDS:
        raise LocalServerError(f"{SEARCH_ENV}={kind!r}: expected one of {', '.join(KINDS)}")
    return kind


def new_local_search(data_dir: str | Path | None = None, port: int = 0, *,
                     engine: str | None = None, version: str | None = None,
                     settings: Mapping[str, str] | None = None) -> LocalServer:
    """A local search server, not yet started: of ``engine`` (and ``version``) when
    given, else of the configured kind and version (``PATHKEEPER_SEARCH``,
    ``PATHKEEPER_SEARCH_VERSION``). ``settings``: more lines of a real node's
    configuration (the stand-in has none, and ignores them)."""
    if engine is None:
        engine = search_kind()
        version = version or os.environ.get(VERSION_ENV, "").strip() or None
    if engine == "noida":
        return LocalNoida(data_dir, port)
    return LocalSearchNode(data_dir, port, engine=engine, version=version, settings=settings)


__all__ = ["LocalServer", "LocalServerError", "new_local_search", "search_kind"]
