"""Test fixtures: a real throwaway PostgreSQL cluster per session, a fresh database per test.

The template database is migrated once with Alembic; each test gets
``CREATE DATABASE ... TEMPLATE`` (fast), so tests that need many connections
(locks, ordering, LISTEN) are isolated without rollback tricks.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from coordinator import Coordinator
from coordinator.migrate import upgrade
from indexer.elasticsearch_index import drop_alias_and_indices
from indexer.search_client import open_search
from indexer.search_engine import SearchEngine
from indexer.worker import Worker, WorkerConfig
from pathkeeper.local.postgres import LocalPostgres
from pathkeeper.local.search import new_local_search

_counter = itertools.count()
_aliases = itertools.count()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[LocalPostgres]:
    # Prepared transactions are enabled so that tests can show the log reader ignores them.
    with LocalPostgres(extra_settings={"max_prepared_transactions": "8"}) as pg:
        pg.create_database("pk_template")
        upgrade(pg.url("pk_template"))
        yield pg


@pytest.fixture
def database_url(pg_cluster: LocalPostgres) -> str:
    name = f"pk_test_{os.getpid()}_{next(_counter)}"
    return pg_cluster.create_database(name, template="pk_template")


@pytest.fixture
def coord(database_url: str) -> Iterator[Coordinator]:
    with Coordinator.connect(database_url, lock_timeout=5.0) as c:
        yield c


@pytest.fixture
def ns(coord: Coordinator) -> str:
    coord.create_namespace("t")
    return "t"


@pytest.fixture(scope="session")
def es_url() -> Iterator[str]:
    """A real search server: the cluster at ``ES_URL`` when set, else one throwaway
    local node for the whole session (Elasticsearch; noida-db with
    ``PATHKEEPER_SEARCH=noida``)."""
    if os.environ.get("ES_URL"):
        yield os.environ["ES_URL"]
        return
    with new_local_search() as server:
        yield server.url


@pytest.fixture
def es(es_url: str) -> Iterator[SearchEngine]:
    client = open_search(es_url, request_timeout=60)
    yield client
    client.close()


@pytest.fixture
def alias(es: SearchEngine) -> Iterator[str]:
    """An index alias of this test's own (and so its own concrete indices and its own
    indexer checkpoint consumer), deleted afterwards."""
    name = f"pk-test-{os.getpid()}-{next(_aliases)}"
    yield name
    drop_alias_and_indices(es, name)
    # Also indices the alias no longer points to (by name: SearchEngine 8 refuses
    # wildcard deletes by default).
    for index in es.get_indices(f"{name}-*"):
        es.delete_index(index)


@pytest.fixture
def worker(database_url: str, es_url: str, alias: str) -> Iterator[Worker]:
    """The indexer worker on this test's database and alias, in a thread for the test."""
    w = Worker(WorkerConfig(database_url=database_url, es_url=es_url, alias=alias,
                            partitions=1, poll_interval=0.2))
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    yield w
    w.stop()
    thread.join(timeout=30)
    assert not thread.is_alive()


class _NotASearchServer(BaseHTTPRequestHandler):
    """Answers every GET with a JSON body that names no search engine."""

    def do_GET(self) -> None:
        body = json.dumps({"name": "some other service", "version": "1.0"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def other_server() -> Iterator[str]:
    """A real HTTP server that is no search engine (for the engine check)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotASearchServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
