"""Test fixtures: a real throwaway PostgreSQL cluster per session, a fresh database per test.

The template database is migrated once with Alembic; each test gets
``CREATE DATABASE ... TEMPLATE`` (fast), so tests that need many connections
(locks, ordering, LISTEN) are isolated without rollback tricks.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from coordinator import Coordinator
from coordinator.local_postgres import LocalPostgres
from coordinator.migrate import upgrade

_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[LocalPostgres]:
    with LocalPostgres() as pg:
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
