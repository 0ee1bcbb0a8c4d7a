"""``merge_metadata`` over HTTP: ``PATCH .../node/metadata`` and ``.../nodes/{id}/metadata``,
the batch item, and its refusals, through the real app and PostgreSQL. No route, model
or client code names the command: all of it is read from its declaration."""

from __future__ import annotations

from fastapi.testclient import TestClient
from http_support import Keys, err, ok

from coordinator import Coordinator

A = "/v1/namespaces/a"


def test_merge_metadata_by_path_by_id_and_in_a_batch(
    client: TestClient, keys: Keys, coord: Coordinator
) -> None:
    h = Keys.h(keys.a_write)
    f = ok(client.post(f"{A}/files", json={"path": "/f", "content": "c",
                                           "metadata": {"owner": "ann", "old": 1}},
                       headers=h), 201)
    m = ok(client.patch(f"{A}/node/metadata", params={"path": "/f"},
                        json={"metadata": {"old": None, "tag": "x"}}, headers=h))
    assert m["node"]["metadata"] == {"owner": "ann", "tag": "x"} and m["version"] == 2
    assert m["seq"] > f["seq"]
    fid = f["node"]["id"]
    ok(client.patch(f"{A}/nodes/{fid}/metadata", json={"metadata": {"k": 1}},
                    headers={**h, "If-Match": '"2"'}))
    err(client.patch(f"{A}/nodes/{fid}/metadata", json={"metadata": {"k": 2}},
                     headers={**h, "If-Match": '"2"'}), 412, "precondition_failed")
    err(client.patch(f"{A}/node/metadata", params={"path": "/"}, json={"metadata": {}},
                     headers=h), 422, "invalid_argument")
    err(client.patch(f"{A}/node/metadata", params={"path": "/f"}, json={"metadata": []},
                     headers=h), 422, "invalid_request")
    err(client.patch(f"{A}/node/metadata", params={"path": "/f"}, json={"metadata": {}},
                     headers=Keys.h(keys.a_read)), 403, "forbidden")
    batch = ok(client.post(f"{A}/batch", json={"operations": [
        {"op": "merge_metadata", "ref": "/f", "metadata": {"k": 3}, "if_version": 3},
        {"op": "merge_metadata", "ref": fid, "metadata": {"owner": None}},
    ]}, headers=h))
    assert [r["node"]["metadata"] for r in batch["results"]] == [
        {"owner": "ann", "tag": "x", "k": 3}, {"tag": "x", "k": 3}]
    node = coord.stat("a", "/f")
    assert (node.metadata, node.content, node.version) == ({"tag": "x", "k": 3}, "c", 5)
