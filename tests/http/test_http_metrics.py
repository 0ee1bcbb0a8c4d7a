"""``/metrics``: requests by route template and status with their latency, in flight and
429s per limits pool, and the build; counted by real requests, concurrent where a pool
must fill."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

import httpx
from fastapi.testclient import TestClient
from http_support import Keys, LiveServer
from prometheus_client.parser import text_string_to_metric_families

from pathkeeper.http.app import create_app
from pathkeeper.http.settings import ServiceSettings

REQUESTS = "pathkeeper_http_request_duration_seconds"


def scrape(get: Callable[[str], httpx.Response]) -> dict[tuple[str, frozenset[tuple[str, str]]],
                                                          float]:
    resp = get("/metrics")
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(resp.text)
        for sample in family.samples
    }


def count(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], method: str,
          route: str, status: int) -> float:
    labels = frozenset({"method": method, "route": route, "status": str(status)}.items())
    return samples.get((f"{REQUESTS}_count", labels), 0.0)


def test_requests_by_route_template_and_status(client: TestClient, keys: Keys) -> None:
    w, r = Keys.h(keys.a_write), Keys.h(keys.a_read)
    made = client.post("/v1/namespaces/a/dirs", json={"path": "/d"}, headers=w)
    node_id = made.json()["node"]["id"]
    for _ in range(3):  # the lane's rename, back and forth
        assert client.post("/v1/namespaces/a/node/rename", params={"path": "/d"},
                           json={"name": "e"}, headers=w).status_code == 200
        assert client.post("/v1/namespaces/a/node/rename", params={"path": "/e"},
                           json={"name": "d"}, headers=w).status_code == 200
    assert client.get(f"/v1/namespaces/a/nodes/{node_id}", headers=r).status_code == 200
    assert client.get("/v1/namespaces/a/node", params={"path": "/nope"},
                      headers=r).status_code == 404
    assert client.get("/v1/namespaces", headers=r).status_code == 200
    assert client.get("/no/such/url").status_code == 404
    assert client.get("/v1/namespaces", headers=Keys.h("pk_bogus")).status_code == 401

    samples = scrape(client.get)
    ns_url = "/v1/namespaces/{ns}"
    assert count(samples, "POST", f"{ns_url}/dirs", 201) == 1
    assert count(samples, "POST", f"{ns_url}/node/rename", 200) == 6
    assert count(samples, "GET", f"{ns_url}/nodes/{{node_id}}", 200) == 1
    assert count(samples, "GET", f"{ns_url}/node", 404) == 1
    assert count(samples, "GET", "/v1/namespaces", 200) == 1
    assert count(samples, "GET", "unmatched", 404) == 1
    assert count(samples, "GET", "/v1/namespaces", 401) == 1
    # Never a raw path, namespace or node id as a label.
    routes = {dict(labels).get("route") for name, labels in samples if name.startswith(REQUESTS)}
    assert not any(node_id in (route or "") or "/a/" in (route or "") for route in routes)
    rename = frozenset({"method": "POST", "route": f"{ns_url}/node/rename",
                        "status": "200"}.items())
    assert samples[(f"{REQUESTS}_sum", rename)] > 0
    build = [labels for name, labels in samples if name == "pathkeeper_build_info"]
    assert len(build) == 1 and dict(build[0])["version"]
    assert samples[("pathkeeper_http_inflight", frozenset({("pool", "short")}))] == 0
    assert samples[("pathkeeper_http_inflight_limit", frozenset({("pool", "short")}))] == 64


def test_inflight_and_429_per_pool(settings: ServiceSettings, keys: Keys) -> None:
    """One long poll holds the only long-poll slot: a second one gets 429, counted in
    its pool, while the first shows as in flight."""
    app = create_app(replace(settings, max_long_polls=1, max_long_polls_per_key=1))
    headers = Keys.h(keys.a_read)
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        waiting = threading.Thread(
            target=lambda: httpx.get(f"{server.url}/v1/indexed",
                                     params={"seq": 10**9, "timeout": 3}, headers=headers,
                                     timeout=30))
        waiting.start()
        try:
            for _ in range(200):  # until the first poll holds its slot
                samples = scrape(http.get)
                if samples[("pathkeeper_http_inflight", frozenset({("pool", "long_poll")}))]:
                    break
                threading.Event().wait(0.02)
            refused = http.get("/v1/indexed", params={"seq": 10**9, "timeout": 3},
                               headers=headers)
            assert refused.status_code == 429
            samples = scrape(http.get)
        finally:
            waiting.join()
    pool = frozenset({("pool", "long_poll")})
    assert samples[("pathkeeper_http_inflight", pool)] == 1
    assert samples[("pathkeeper_http_overloaded_total", pool)] == 1
    assert samples[("pathkeeper_http_overloaded_total", frozenset({("pool", "short")}))] == 0
    # Refused before any routing, still under the route it asked for.
    assert count(samples, "GET", "/v1/indexed", 429) == 1
