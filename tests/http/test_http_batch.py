"""POST /v1/namespaces/{ns}/batch: all or nothing, results in order, first error with index."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from fastapi.testclient import TestClient
from http_support import Keys, err, ok

from coordinator import Coordinator
from pathkeeper.http.settings import ServiceSettings

URL = "/v1/namespaces/a/batch"


def test_batch_applies_in_order(client: TestClient, keys: Keys, coord: Coordinator) -> None:
    coord.mkdir("a", "/plan")
    f = coord.create_file("a", "/plan/record", "v1", {"state": "draft"})
    ops = [
        {"op": "rename", "ref": "/plan", "name": "plan-2026"},
        {"op": "mkdir", "path": "/plan-2026/archive"},  # sees the rename above
        {"op": "move", "ref": f.node.id, "dst": "/plan-2026/archive/record"},
        {"op": "write_file", "ref": "/plan-2026/archive/record", "content": "v2",
         "metadata": {"state": "final"}, "if_version": 2},
        {"op": "create_file", "path": "/plan-2026/new", "content": "n"},
        {"op": "mkdir", "path": "/tmp/x/y", "parents": True},
        {"op": "delete", "ref": "/tmp", "recursive": True},
    ]
    out = ok(client.post(URL, json={"operations": ops}, headers=Keys.h(keys.a_write)))
    results = out["results"]
    assert [r["node"]["path"] for r in results] == [
        "/plan-2026", "/plan-2026/archive", "/plan-2026/archive/record",
        "/plan-2026/archive/record", "/plan-2026/new", "/tmp/x/y", "/tmp"]
    seqs = [r["seq"] for r in results]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    # One transaction: one block of positions.
    assert len({s // 65536 for s in seqs}) == 1
    node = coord.get("a", f.node.id)
    assert (node.path, node.content, node.metadata) == (
        "/plan-2026/archive/record", "v2", {"state": "final"})


def test_batch_error_rolls_back_everything(client: TestClient, keys: Keys,
                                           coord: Coordinator) -> None:
    coord.mkdir("a", "/d")
    coord.create_file("a", "/d/f", "x")
    before = [(n.path, n.version) for n in coord.walk("a")]
    events_before, _ = coord.read_events(namespaces=["a"])
    cases = [
        ([{"op": "rename", "ref": "/d", "name": "e"}, {"op": "mkdir", "path": "/e"}],
         1, 409, "already_exists"),
        ([{"op": "mkdir", "path": "/n"}, {"op": "write_file", "ref": "/d/f", "content": "y",
                                           "if_version": 5}], 1, 412, "precondition_failed"),
        ([{"op": "mkdir", "path": "/n"}, {"op": "mkdir", "path": "/n/o"},
          {"op": "delete", "ref": "/nope"}], 2, 404, "not_found"),
        ([{"op": "move", "ref": "/d", "dst": "/d/in"}], 0, 400, "invalid_move"),
        ([{"op": "mkdir", "path": "/ok"}, {"op": "mkdir", "path": "/bad/.."}], 1, 422,
         "invalid_name"),
    ]
    for ops, index, status, code in cases:
        body = err(client.post(URL, json={"operations": ops}, headers=Keys.h(keys.a_write)),
                   status, code)
        assert body["error"]["index"] == index, body
    assert [(n.path, n.version) for n in coord.walk("a")] == before
    assert coord.read_events(namespaces=["a"])[0] == events_before
    # Malformed batches.
    h = Keys.h(keys.a_write)
    err(client.post(URL, json={"operations": []}, headers=h), 422, "invalid_request")
    err(client.post(URL, json={"operations": [{"op": "chmod", "ref": "/d"}]}, headers=h), 422,
        "invalid_request")
    err(client.post(URL, json={"operations": [{"op": "mkdir"}]}, headers=h), 422,
        "invalid_request")


def test_batch_limits_and_idempotency(make_client: Callable[..., TestClient], keys: Keys,
                                      coord: Coordinator, settings: ServiceSettings) -> None:
    client = make_client(coordinator=replace(settings.coordinator, max_group_ops=3))
    h = {**Keys.h(keys.a_write), "Idempotency-Key": "batch-1"}
    ops = [{"op": "mkdir", "path": f"/d{i}"} for i in range(4)]
    err(client.post(URL, json={"operations": ops}, headers=h), 413, "too_large")
    first = ok(client.post(URL, json={"operations": ops[:3]}, headers=h))
    again = client.post(URL, json={"operations": ops[:3]}, headers=h)
    assert again.json() == first and again.headers["Idempotent-Replayed"] == "true"
    err(client.post(URL, json={"operations": ops[:2]}, headers=h), 422,
        "idempotency_key_reused")
    assert [n.path for n in coord.walk("a")] == ["/", "/d0", "/d1", "/d2"]
