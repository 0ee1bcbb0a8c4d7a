"""Every node and namespace endpoint, by path and by id, through the real app and PostgreSQL."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from http_support import Keys, err, ok

from coordinator import Coordinator

A = "/v1/namespaces/a"


def test_tree_lifecycle_by_path_and_id(client: TestClient, keys: Keys, coord: Coordinator) -> None:
    h = Keys.h(keys.a_write)
    d = ok(client.post(f"{A}/dirs", json={"path": "/clinton"}, headers=h), 201)
    assert d["node"]["path"] == "/clinton" and d["version"] == 1 and d["seq"] > 0
    p = ok(client.post(f"{A}/dirs", json={"path": "/clinton/projects/es", "parents": True},
                       headers=h), 201)
    assert p["node"]["path"] == "/clinton/projects/es"
    again = ok(client.post(f"{A}/dirs", json={"path": "/clinton/projects/es", "parents": True},
                           headers=h), 200)
    assert again["seq"] is None
    f = ok(client.post(f"{A}/files", json={"path": "/clinton/projects/es/README.txt",
                                           "content": "hello", "metadata": {"k": 1}},
                       headers=h), 201)
    fid = f["node"]["id"]
    assert f["node"]["content"] == "hello" and f["node"]["metadata"] == {"k": 1}

    by_path = client.get(f"{A}/node", params={"path": "/clinton/projects/es/README.txt"},
                         headers=h)
    assert ok(by_path)["id"] == fid and by_path.headers["ETag"] == '"1"'
    assert ok(client.get(f"{A}/nodes/{fid}", headers=h))["path"] == (
        "/clinton/projects/es/README.txt")

    w = ok(client.put(f"{A}/node/content", params={"path": "/clinton/projects/es/README.txt"},
                      json={"content": "v2"}, headers={**h, "If-Match": '"1"'}))
    assert w["version"] == 2 and w["node"]["content"] == "v2"
    w = ok(client.put(f"{A}/nodes/{fid}/content", json={"content": "v3", "if_version": 2},
                      headers=h))
    assert w["version"] == 3

    r = ok(client.post(f"{A}/node/rename", params={"path": "/clinton"}, json={"name": "bill"},
                       headers=h))
    assert r["node"]["path"] == "/bill" and r["seq"] > w["seq"]
    assert ok(client.get(f"{A}/nodes/{fid}", headers=h))["path"] == (
        "/bill/projects/es/README.txt")
    m = ok(client.post(f"{A}/nodes/{fid}/move", json={"dst": "/bill/README.md"}, headers=h))
    # A move answers the file without its content (null); a GET reads it.
    assert (m["node"]["path"], m["node"]["content"]) == ("/bill/README.md", None)
    ok(client.post(f"{A}/node/move", params={"path": "/bill/projects"},
                   json={"dst": "/projects"}, headers=h))
    ok(client.post(f"{A}/nodes/{fid}/rename", json={"name": "R.md", "if_version": 4},
                   headers=h))

    listing = ok(client.get(f"{A}/node/children", params={"path": "/"}, headers=h))
    assert [n["name"] for n in listing["nodes"]] == ["bill", "projects"]
    assert listing["cursor"] is None
    root_id = ok(client.get(f"{A}/node", params={"path": "/"}, headers=h))["id"]
    by_id = ok(client.get(f"{A}/nodes/{root_id}/children", headers=h))
    assert by_id["nodes"] == listing["nodes"]

    err(client.delete(f"{A}/node", params={"path": "/projects"}, headers=h), 409,
        "directory_not_empty")
    dl = ok(client.delete(f"{A}/node", params={"path": "/projects", "recursive": "true"},
                          headers=h))
    assert dl["node"]["path"] == "/projects"
    ok(client.delete(f"{A}/nodes/{fid}", headers={**h, "If-Match": "5"}))
    err(client.get(f"{A}/nodes/{fid}", headers=h), 404, "not_found")
    assert [n.path for n in coord.walk("a")] == ["/", "/bill"]


def test_set_metadata_by_path_by_id_and_in_a_batch(
    client: TestClient, keys: Keys, coord: Coordinator
) -> None:
    h = Keys.h(keys.a_write)
    d = ok(client.post(f"{A}/dirs", json={"path": "/d"}, headers=h), 201)
    f = ok(client.post(f"{A}/files", json={"path": "/d/f", "content": "c"}, headers=h), 201)
    m = ok(client.put(f"{A}/node/metadata", params={"path": "/d"},
                      json={"metadata": {"owner": "bill"}}, headers=h))
    assert m["node"]["metadata"] == {"owner": "bill"} and m["version"] == 2
    assert m["seq"] > f["seq"] and m["node"]["id"] == d["node"]["id"]
    fid = f["node"]["id"]
    ok(client.put(f"{A}/nodes/{fid}/metadata", json={"metadata": {"k": 1}},
                  headers={**h, "If-Match": '"1"'}))
    err(client.put(f"{A}/nodes/{fid}/metadata", json={"metadata": {"k": 2}},
                   headers={**h, "If-Match": '"1"'}), 412, "precondition_failed")
    err(client.put(f"{A}/node/metadata", params={"path": "/d"}, json={"meta": {}},
                   headers=h), 422, "invalid_request")
    err(client.put(f"{A}/node/metadata", params={"path": "/d"}, json={"metadata": {}},
                   headers=Keys.h(keys.a_read)), 403, "forbidden")
    batch = ok(client.post(f"{A}/batch", json={"operations": [
        {"op": "set_metadata", "ref": "/d/f", "metadata": {"k": 3}, "if_version": 2},
        {"op": "set_metadata", "ref": "/d", "metadata": {}},
    ]}, headers=h))
    assert [r["node"]["metadata"] for r in batch["results"]] == [{"k": 3}, {}]
    assert coord.stat("a", "/d/f").metadata == {"k": 3}
    assert coord.stat("a", "/d/f").content == "c"


def test_list_pagination(client: TestClient, keys: Keys, coord: Coordinator) -> None:
    names = sorted(f"f{i:02d}" for i in range(25))
    for n in names:
        coord.create_file("a", f"/{n}")
    h = Keys.h(keys.a_read)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"path": "/", "limit": 10}
        if cursor:
            params["cursor"] = cursor
        page = ok(client.get(f"{A}/node/children", params=params, headers=h))
        seen += [n["name"] for n in page["nodes"]]
        pages += 1
        cursor = page["cursor"]
        if cursor is None:
            break
    assert seen == names and pages == 3
    err(client.get(f"{A}/node/children", params={"path": "/", "limit": 0}, headers=h), 422,
        "invalid_request")
    err(client.get(f"{A}/node/children", params={"path": "/", "limit": 100000}, headers=h),
        422, "invalid_request")
    err(client.get(f"{A}/node/children", params={"path": "/", "cursor": "%%%"}, headers=h),
        400, "invalid_cursor")


def test_namespaces(client: TestClient, keys: Keys) -> None:
    admin = Keys.h(keys.admin)
    c = ok(client.post("/v1/namespaces", json={"name": "c"}, headers=admin), 201)
    assert c["node"]["path"] == "/" and c["seq"] > 0
    err(client.post("/v1/namespaces", json={"name": "c"}, headers=admin), 409, "already_exists")
    err(client.post("/v1/namespaces", json={"name": "bad name"}, headers=admin), 422,
        "invalid_request")  # the schema's pattern refuses it
    assert ok(client.get("/v1/namespaces", headers=admin))["namespaces"] == ["a", "b", "c"]
    assert ok(client.get("/v1/namespaces", headers=Keys.h(keys.a_read)))["namespaces"] == ["a"]
    ok(client.post("/v1/namespaces/c/dirs", json={"path": "/x"}, headers=admin), 201)
    err(client.delete("/v1/namespaces/c", headers=admin), 409, "directory_not_empty")
    d = ok(client.delete("/v1/namespaces/c", params={"force": "true"}, headers=admin))
    assert d["seq"] > c["seq"]
    err(client.delete("/v1/namespaces/c", headers=admin), 404, "not_found")
    # Managing namespaces needs admin scope.
    err(client.delete("/v1/namespaces/a", headers=Keys.h(keys.a_write)), 403, "forbidden")
    err(client.post("/v1/namespaces", json={"name": "a2"}, headers=Keys.h(keys.a_write)), 403,
        "forbidden")


def test_tree_errors(client: TestClient, keys: Keys, coord: Coordinator) -> None:
    h = Keys.h(keys.a_write)
    coord.mkdir("a", "/d")
    f = coord.create_file("a", "/d/f", "x")
    err(client.get(f"{A}/node", params={"path": "/nope"}, headers=h), 404, "not_found")
    err(client.get(f"{A}/nodes/not-a-uuid", headers=h), 404, "not_found")
    err(client.get(f"{A}/nodes/00000000-0000-0000-0000-000000000000", headers=h), 404,
        "not_found")
    err(client.post(f"{A}/dirs", json={"path": "/d"}, headers=h), 409, "already_exists")
    err(client.post(f"{A}/dirs", json={"path": "/d/f/x"}, headers=h), 409, "not_a_directory")
    err(client.put(f"{A}/node/content", params={"path": "/d"}, json={"content": "x"},
                   headers=h), 409, "is_a_directory")
    err(client.post(f"{A}/dirs", json={"path": "/d/.."}, headers=h), 422, "invalid_name")
    err(client.post(f"{A}/dirs", json={"path": "relative"}, headers=h), 422, "invalid_path")
    err(client.post(f"{A}/files", json={"path": "/d/g", "content": "a\x00b"}, headers=h), 422,
        "invalid_content")
    err(client.post(f"{A}/node/move", params={"path": "/d"}, json={"dst": "/d/sub"},
                    headers=h), 400, "invalid_move")
    err(client.delete(f"{A}/node", params={"path": "/"}, headers=h), 400, "invalid_move")
    # Compare-and-swap, by header and by body, by path and by id.
    err(client.put(f"{A}/nodes/{f.node.id}/content", json={"content": "y"},
                   headers={**h, "If-Match": '"7"'}), 412, "precondition_failed")
    err(client.post(f"{A}/node/rename", params={"path": "/d/f"},
                    json={"name": "g", "if_version": 9}, headers=h), 412, "precondition_failed")
    err(client.delete(f"{A}/node", params={"path": "/d/f", "if_version": 3}, headers=h), 412,
        "precondition_failed")
    err(client.put(f"{A}/node/content", params={"path": "/d/f"}, json={"content": "y"},
                   headers={**h, "If-Match": "abc"}), 422, "invalid_request")
    err(client.put(f"{A}/node/content", params={"path": "/d/f"},
                   json={"content": "y", "if_version": 2}, headers={**h, "If-Match": "1"}),
        422, "invalid_request")
    # Malformed bodies: the same error shape.
    err(client.post(f"{A}/dirs", json={"path": "/x", "bogus": 1}, headers=h), 422,
        "invalid_request")
    err(client.post(f"{A}/dirs", content=b"{not json", headers={**h,
                    "Content-Type": "application/json"}), 422, "invalid_request")
    err(client.get("/v1/nothing-here", headers=h), 404, "not_found")
    assert coord.stat("a", "/d/f").version == 1  # nothing above changed it


def test_limits(make_client: Any, keys: Keys) -> None:
    client = make_client(max_body_bytes=1000, max_path_bytes=64)
    h = Keys.h(keys.a_write)
    err(client.post(f"{A}/files", json={"path": "/big", "content": "x" * 2000}, headers=h),
        413, "too_large")

    def chunks() -> Any:
        yield b'{"path": "/big", "content": "'
        for _ in range(10):
            yield b"x" * 200
        yield b'"}'

    # A chunked body (no Content-Length) that grows past the cap.
    err(client.post(f"{A}/files", content=chunks(), headers={
        **h, "Content-Type": "application/json"}), 413, "too_large")
    err(client.post(f"{A}/dirs", json={"path": "/" + "x" * 100}, headers=h), 422,
        "invalid_path")
    deep = "/" + "/".join(["d"] * 300)
    err(make_client().post(f"{A}/dirs", json={"path": deep, "parents": True}, headers=h), 422,
        "invalid_path")

    busy = make_client(max_inflight=0)
    r = busy.get(f"{A}/node", params={"path": "/"}, headers=h)
    err(r, 429, "overloaded")
    assert r.headers["Retry-After"] == "1"
    assert busy.get("/healthz").status_code == 200


def test_health_and_docs(client: TestClient) -> None:
    assert ok(client.get("/healthz")) == {"status": "ok"}
    ready = ok(client.get("/readyz"))
    assert ready["status"] == "ok" and ready["postgres"] is True
    assert ready["indexer_lag_events"] is None  # no indexer checkpoint yet
    spec = ok(client.get("/openapi.json"))
    assert "/v1/namespaces/{ns}/batch" in spec["paths"]
    assert "/v1/namespaces/{ns}/events" in spec["paths"]
    assert client.get("/docs").status_code == 200
