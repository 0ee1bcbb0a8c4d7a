"""The operator page's server side: ``/ui`` and its two assets are a static shell (no key,
no data, a strict Content-Security-Policy), its data comes from ``/v1`` routes behind a
read key, among them ``/v1/indexer/status`` (what ``pathkeeper indexer status`` shows),
and every one of them counts in ``/metrics``. The page itself is driven in a real browser
by ``test_http_ui_browser.py``."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient
from http_support import Keys, err, ok
from test_http_metrics import count, scrape

from coordinator import Coordinator
from indexer.worker import Worker, WorkerConfig
from pathkeeper.http.settings import ServiceSettings

STATUS = "/v1/indexer/status"


def catch_up(settings: ServiceSettings, es_url: str, alias: str) -> None:
    """Run the indexer once to the end of the log (its checkpoints exist from then on)."""
    Worker(WorkerConfig(database_url=settings.database_url, es_url=es_url, alias=alias,
                        partitions=2, once=True)).run()


def test_page_and_assets_are_a_static_shell(client: TestClient) -> None:
    page = client.get("/ui")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    # Only the service's own files: no CDN, no inline script, no data sent elsewhere.
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "connect-src 'self'" in csp and "unsafe-inline" not in csp
    assert page.headers["cache-control"] == "no-store"
    assert 'src="/ui/app.js"' in page.text and 'href="/ui/app.css"' in page.text
    assert "http://" not in page.text and "https://" not in page.text
    script = client.get("/ui/app.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    # Names are user data: the script never parses them as HTML.
    assert "innerHTML" not in script.text and "insertAdjacentHTML" not in script.text
    assert "sessionStorage" in script.text and "localStorage" not in script.text
    style = client.get("/ui/app.css")
    assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")
    assert client.get("/ui/other.js").status_code == 404


def test_indexer_status_needs_a_read_key_and_shows_lag_and_holders(
    make_client: Callable[..., TestClient], keys: Keys, coord: Coordinator, es_url: str, alias: str,
    settings: ServiceSettings,
) -> None:
    client: TestClient = make_client(es_url=es_url, index_alias=alias)
    never = ok(client.get(STATUS, headers=Keys.h(keys.a_read)))
    assert never == {"consumer": f"indexer:{alias}", "partitions": [],
                     "dead_letters_pending": None, "held_back_by": [],
                     "shards": [{"name": "default", "partitions": [], "lag_events": 0,
                                 "lag_seconds": 0.0}]}
    catch_up(settings, es_url, alias)
    coord.mkdir("a", "/d1")
    coord.mkdir("a", "/d2")
    coord.mkdir("b", "/other")

    admin = ok(client.get(STATUS, headers=Keys.h(keys.admin)))
    assert [p["partition"] for p in admin["partitions"]] == [0, 1]
    assert sum(p["lag_events"] for p in admin["partitions"]) == 3
    assert all(p["holder_pid"] is None for p in admin["partitions"])  # no worker runs
    lagging = {n["namespace"]: n["lag_events"] for p in admin["partitions"]
               for n in p["namespaces"]}
    assert lagging == {"a": 2, "b": 1}
    assert admin["dead_letters_pending"] == 0
    # Per shard (one server: one shard, holding the same partitions).
    (shard,) = admin["shards"]
    assert shard["name"] == "default" and shard["lag_events"] == 3
    assert shard["partitions"] == admin["partitions"]

    # A key of one namespace sees that namespace's lag only: its partitions' counts are
    # its own events, and no other namespace is named.
    reader = ok(client.get(STATUS, headers=Keys.h(keys.a_read)))
    assert sum(p["lag_events"] for p in reader["partitions"]) == 2
    assert {n["namespace"] for p in reader["partitions"] for n in p["namespaces"]} == {"a"}
    assert reader["dead_letters_pending"] is None and reader["held_back_by"] == []
    assert [s["lag_events"] for s in reader["shards"]] == [2]

    err(client.get(STATUS), 401, "unauthorized")
    err(client.get(STATUS, headers=Keys.h("pk_made_up")), 401, "unauthorized")


def test_status_route_is_documented_and_every_page_route_is_counted(
    client: TestClient, keys: Keys
) -> None:
    spec = ok(client.get("/openapi.json"))
    op = spec["paths"][STATUS]["get"]
    assert op["operationId"] == "indexer_status"
    assert {"401", "503"} <= set(op["responses"]) and "409" not in op["responses"]
    assert "/ui" not in spec["paths"]  # the page is no API operation

    for url in ("/ui", "/ui/app.js", "/ui/app.css"):
        assert client.get(url).status_code == 200
    assert client.get(STATUS, headers=Keys.h(keys.a_read)).status_code == 200
    assert client.get(STATUS).status_code == 401
    samples = scrape(client.get)
    for route in ("/ui", "/ui/app.js", "/ui/app.css"):
        assert count(samples, "GET", route, 200) == 1, route
    assert count(samples, "GET", STATUS, 200) == 1
    assert count(samples, "GET", STATUS, 401) == 1
