"""The secured node of these tests: one Elasticsearch node for the session with security
on (TLS with a CA made for it, users), of the version ``PATHKEEPER_SEARCH_VERSION``
names when the suite runs on Elasticsearch (default: the suite's). On another engine's
leg it is the default Elasticsearch: no other engine's test distribution has security."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pathkeeper.local.search import VERSION_ENV, search_kind
from pathkeeper.local.secured_search import SecuredSearchNode


@pytest.fixture(scope="session")
def secured() -> Iterator[SecuredSearchNode]:
    kind = search_kind()
    if kind == "noida":
        pytest.skip("the secured node is a real Elasticsearch node (Java); noida-db has "
                    "no security to test")
    version = os.environ.get(VERSION_ENV, "").strip() or None
    with SecuredSearchNode(version=version if kind == "elasticsearch" else None,
                           heap="512m") as node:
        yield node
