"""The secured node of these tests: one Elasticsearch node for the session with security
on (TLS with a CA made for it, users), of the version ``PATHKEEPER_SEARCH_VERSION``
names (default: the suite's)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pathkeeper.local.search import VERSION_ENV
from pathkeeper.local.secured_search import SecuredSearchNode


@pytest.fixture(scope="session")
def secured() -> Iterator[SecuredSearchNode]:
    version = os.environ.get(VERSION_ENV, "").strip() or None
    with SecuredSearchNode(version=version, heap="512m") as node:
        yield node
