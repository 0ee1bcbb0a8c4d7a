"""Fixtures for the indexer tests: a real search server, an alias per test, workers.

The search server is the noida-db binary (``indexer.local_search``) started once
per session, or the cluster at ``ES_URL`` when that is set. Each test gets its
own alias (so its own concrete index and its own checkpoint consumer), deleted
afterwards. (This directory has no ``__init__.py`` on purpose: a package named
``indexer`` here would shadow the real one.)
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest
from elasticsearch import Elasticsearch

from indexer.local_search import LocalSearch
from indexer.mapping import drop_alias_and_indices

_aliases = itertools.count()


@pytest.fixture(scope="session")
def es_url() -> Iterator[str]:
    if os.environ.get("ES_URL"):
        yield os.environ["ES_URL"]
        return
    with LocalSearch() as server:
        yield server.url


@pytest.fixture
def es(es_url: str) -> Iterator[Elasticsearch]:
    client = Elasticsearch(es_url, request_timeout=60)
    yield client
    client.close()


@pytest.fixture
def alias(es: Elasticsearch) -> Iterator[str]:
    name = f"pk-idx-{os.getpid()}-{next(_aliases)}"
    yield name
    drop_alias_and_indices(es, name)
    # Also indices a test made that the alias no longer points to (names, not a wildcard
    # delete: Elasticsearch 8 refuses those by default).
    for index in es.indices.get(index=f"{name}-*", expand_wildcards="all"):
        es.indices.delete(index=index)
