"""Fixtures of the HTTP tests: the real app on a fresh migrated database, API keys,
a real uvicorn server on a free loopback port, and the session's search server (see
``tests/conftest.py``)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from fastapi import FastAPI
from http_support import Keys, LiveServer

with warnings.catch_warnings():
    # Starlette 1.x asks for its httpx fork (httpx2) in TestClient; httpx works the same
    # and is what the project depends on.
    warnings.filterwarnings("ignore", message=".*httpx2", category=UserWarning)
    from fastapi.testclient import TestClient

from coordinator import Coordinator
from coordinator.api_keys import create_key
from pathkeeper.http.app import create_app
from pathkeeper.http.settings import ServiceSettings


@pytest.fixture
def settings(database_url: str) -> ServiceSettings:
    return ServiceSettings(database_url=database_url, auth_cache_seconds=0.0)


@pytest.fixture
def open_app() -> Iterator[Callable[[FastAPI], TestClient]]:
    """Return a TestClient (lifespan running) on an app, closed at the end of the test."""
    opened: list[TestClient] = []

    def start(app: FastAPI) -> TestClient:
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        opened.append(client)
        return client

    yield start
    for client in opened:
        client.__exit__(None, None, None)


@pytest.fixture
def make_client(
    settings: ServiceSettings, open_app: Callable[[FastAPI], TestClient]
) -> Callable[..., TestClient]:
    """Build an app with setting overrides and return a TestClient (lifespan running)."""

    def make(**overrides: Any) -> TestClient:
        return open_app(create_app(replace(settings, **overrides)))

    return make


@pytest.fixture
def keys(coord: Coordinator) -> Keys:
    coord.create_namespace("a")
    coord.create_namespace("b")
    return Keys(
        admin=create_key(coord.engine, ["*"], "admin")[1],
        a_write=create_key(coord.engine, ["a"], "write")[1],
        a_read=create_key(coord.engine, ["a"], "read")[1],
        b_write=create_key(coord.engine, ["b"], "write")[1],
    )


@pytest.fixture
def client(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client()


@pytest.fixture
def live_server(settings: ServiceSettings) -> Iterator[LiveServer]:
    with LiveServer(create_app(settings)) as server:
        yield server


