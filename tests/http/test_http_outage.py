"""What a caller and an operator see when a server is down or the schema is behind:
503 with Retry-After and no driver or client text, a ``/readyz`` that checks both
servers, and a ``serve`` that refuses to start on an unmigrated database."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from http_support import Keys

from coordinator import Coordinator
from coordinator.api_keys import create_key
from coordinator.migrate import upgrade
from pathkeeper.http.app import create_app
from pathkeeper.http.settings import ServiceSettings
from pathkeeper.local.postgres import LocalPostgres

#: Words that only driver, client or SQL text contains.
LEAKS = ("psycopg", "sqlalchemy", "select ", "connection failed", "refused", "127.0.0.1",
         "errno", "server closed",
         "transport", "traceback", "sqlstate", "background on this error")


def no_leak(resp: Any, *hidden: str) -> None:
    text = resp.text.lower()
    for word in (*LEAKS, *(h.lower() for h in hidden)):
        assert word not in text, f"{word!r} in {resp.text}"


def unavailable(resp: Any, *hidden: str) -> dict[str, Any]:
    assert resp.status_code == 503, resp.text
    assert int(resp.headers["retry-after"]) > 0
    no_leak(resp, *hidden)
    body: dict[str, Any] = resp.json()
    return body


@pytest.fixture
def own_cluster() -> Iterator[LocalPostgres]:
    """A cluster of the test's own, to stop under a running service."""
    with LocalPostgres() as pg:
        yield pg


def test_database_down_is_503_without_driver_text(
    own_cluster: LocalPostgres, open_app: Callable[[FastAPI], TestClient]
) -> None:
    url = own_cluster.url()
    upgrade(url)
    with Coordinator.connect(url) as coord:
        coord.create_namespace("a")
        secret = create_key(coord.engine, ["*"], "admin")[1]
    client = open_app(create_app(ServiceSettings(database_url=url, auth_cache_seconds=0.0)))
    auth = {"Authorization": f"Bearer {secret}"}
    assert client.get("/readyz").status_code == 200
    assert client.post("/v1/namespaces/a/dirs", json={"path": "/d"},
                       headers=auth).status_code == 201
    own_cluster.pg_ctl_stop("immediate")
    port = str(own_cluster.port)

    ready = unavailable(client.get("/readyz"), port)
    assert ready["postgres"] is False and ready["status"] == "unavailable"
    # A key lookup (no cache), a read, the lane's rename, a listing: each 503.
    unavailable(client.get("/v1/namespaces", headers=auth), port)
    open_client = open_app(create_app(ServiceSettings(database_url=url, auth=False)))
    for resp in (
        open_client.get("/v1/namespaces"),
        open_client.get("/v1/namespaces/a/node", params={"path": "/d"}),
        open_client.post("/v1/namespaces/a/node/rename", params={"path": "/d"},
                         json={"name": "e"}),
        open_client.get("/v1/namespaces/a/node/children", params={"path": "/"}),
    ):
        body = unavailable(resp, port)
        assert body["error"]["code"] == "unavailable"


def test_search_server_down_fails_readiness_and_search_without_client_text(
    keys: Keys, make_client: Callable[..., TestClient]
) -> None:
    client = make_client(es_url="http://127.0.0.1:9")  # nothing listens on the discard port
    ready = unavailable(client.get("/readyz"), ":9")
    assert ready["postgres"] is True and ready["search"] is False
    resp = client.get("/v1/namespaces/a/search", params={"q": "x"},
                      headers=Keys.h(keys.a_read))
    body = unavailable(resp, ":9")
    assert body["error"]["code"] == "unavailable"


def test_readyz_reports_search_ok(client: TestClient, make_client: Callable[..., TestClient],
                                  es_url: str) -> None:
    body = make_client(es_url=es_url).get("/readyz").json()
    assert body["status"] == "ok" and body["search"] is True
    assert client.get("/readyz").json()["search"] is None  # no search server configured


def test_serve_refuses_an_unmigrated_database(pg_cluster: LocalPostgres) -> None:
    url = pg_cluster.create_database("pk_outage_unmigrated")
    proc = subprocess.run(
        [sys.executable, "-m", "pathkeeper", "serve", "--database-url", url, "--port", "1"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "pathkeeper db upgrade" in lines[0]
    assert "serving on" not in proc.stdout
