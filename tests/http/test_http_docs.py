"""The API's documentation: ``/docs`` and ``/redoc`` load with no network (every asset
they reference is served by the service itself), operationIds a reader can use, error
lists per route that match what each route can answer, and 412 for a failed If-Match."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

from fastapi.testclient import TestClient
from http_support import Keys

OPERATION_ID = re.compile(r"[a-z]+(_[a-z]+)*")


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.refs.append(value)


def references(html: str) -> list[str]:
    """Every URL a page loads: attributes, and URLs written in its scripts."""
    parser = _Refs()
    parser.feed(html)
    written = re.findall(r"""(?:url|spec-url)\s*[:=]\s*['"]([^'"]+)['"]""", html)
    return parser.refs + written


def test_docs_pages_reference_only_assets_the_service_serves(client: TestClient) -> None:
    for page in ("/docs", "/redoc"):
        resp = client.get(page)
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
        assert "http://" not in resp.text and "https://" not in resp.text.replace(
            "https://www.w3.org", ""), resp.text
        refs = references(resp.text)
        assert any(ref.endswith(".js") for ref in refs), refs
        for ref in refs:
            assert ref.startswith("/"), f"{page} loads {ref} from elsewhere"
            asset = client.get(ref)
            assert asset.status_code == 200, (page, ref)
            assert len(asset.content) > 1000 or ref.endswith("openapi.json"), (page, ref)


def operations(client: TestClient) -> dict[str, dict[str, Any]]:
    spec = client.get("/openapi.json").json()
    return {f"{method.upper()} {path}": op for path, ops in spec["paths"].items()
            for method, op in ops.items()}


def test_operation_ids_are_readable_and_unique(client: TestClient) -> None:
    ops = operations(client)
    ids = [op["operationId"] for op in ops.values()]
    assert len(ids) == len(set(ids))
    for op_id in ids:
        assert OPERATION_ID.fullmatch(op_id) and "v1" not in op_id and "get" != op_id[-3:], op_id
    assert ops["POST /v1/namespaces/{ns}/node/rename"]["operationId"] == "rename_node"
    assert ops["POST /v1/namespaces/{ns}/nodes/{node_id}/rename"]["operationId"] == \
        "rename_node_by_id"
    assert ops["GET /v1/namespaces/{ns}/node"]["operationId"] == "stat_node"


def test_error_lists_match_each_route(client: TestClient) -> None:
    ops = operations(client)

    def codes(key: str) -> set[str]:
        return {c for c in ops[key]["responses"] if c[0] in "45"}

    assert codes("GET /healthz") == set()
    assert codes("GET /readyz") == {"503"}
    feed = codes("GET /v1/namespaces/{ns}/events")
    assert {"410", "409", "401", "404", "429", "503"} <= feed and "413" not in feed
    assert "408" not in feed
    rename = codes("POST /v1/namespaces/{ns}/node/rename")
    assert {"408", "409", "412", "413", "401", "403", "404", "422", "429", "503"} <= rename
    assert "410" not in rename
    stat = codes("GET /v1/namespaces/{ns}/node")
    assert "408" not in stat and "412" not in stat and "409" not in stat
    for key, op in ops.items():
        for code, response in op["responses"].items():
            if code[0] in "45" and key != "GET /readyz":
                example = response["content"]["application/json"]["example"]
                assert set(example["error"]) >= {"code", "message"}, (key, code)


def test_failed_if_match_is_412_and_a_conflict_stays_409(client: TestClient,
                                                         keys: Keys) -> None:
    w = Keys.h(keys.a_write)
    made = client.post("/v1/namespaces/a/files", json={"path": "/f", "content": "x"},
                       headers=w).json()
    version = made["version"]
    stale = {**w, "If-Match": f'"{version + 5}"'}
    for resp in (
        client.put("/v1/namespaces/a/node/content", params={"path": "/f"},
                   json={"content": "y"}, headers=stale),
        client.post("/v1/namespaces/a/node/rename", params={"path": "/f"}, json={"name": "g"},
                    headers=stale),
        client.post(f"/v1/namespaces/a/nodes/{made['node']['id']}/rename",
                    json={"name": "g"}, headers=stale),
        client.request("DELETE", "/v1/namespaces/a/node", params={"path": "/f"},
                       headers=stale),
    ):
        assert resp.status_code == 412, resp.text
        assert resp.json()["error"]["code"] == "precondition_failed"
    assert client.post("/v1/namespaces/a/files", json={"path": "/f", "content": "x"},
                       headers=w).status_code == 409  # exists: a conflict, not a precondition


def test_every_request_field_has_an_example(client: TestClient) -> None:
    """A reader of /docs sees a value for each field of each request body and parameter,
    and the examples are values the API accepts (the schema's own limits)."""
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    missing: list[str] = []
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body is None:
                continue
            ref = body["schema"].get("$ref", "")
            model = schemas.get(ref.rsplit("/", 1)[-1], {})
            for name, field in model.get("properties", {}).items():
                if name != "op" and not field.get("examples"):
                    missing.append(f"{method.upper()} {path}: {name}")
    assert not missing, missing
    rename = schemas["RenameIn"]["properties"]["name"]
    assert rename["examples"] == ["bill"]
