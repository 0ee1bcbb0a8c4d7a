"""Dot-segments and encoded slashes in URLs never reach a route they do not name.

An HTTP stack normalises ``/nodes/..`` to the parent URL (httpx does it before
sending, proxies on the way): a node id or namespace of ``..`` would turn "delete this
node" into "drop this namespace". The client refuses such segments before sending;
the server refuses any request whose path has a ``.``/``..`` segment (literal or
percent-encoded) or an encoded ``/`` (which the router would decode into a second
segment), whatever sent it.
"""

from __future__ import annotations

import http.client

import pytest
from http_support import Keys, LiveServer

from coordinator import Coordinator, InvalidName, NotFound
from pathkeeper.client import Client, InvalidRequest


@pytest.mark.parametrize("ref", ["..", ".", "a/..", "../a", "x/children"])
def test_client_refuses_dot_segments_and_slashes_in_ids(
    live_server: LiveServer, keys: Keys, coord: Coordinator, ref: str
) -> None:
    coord.create_file("a", "/f", "kept")
    with Client(live_server.url, keys.admin, retries=0) as api:
        for call in (
            lambda: api.delete("a", ref, recursive=True),
            lambda: api.get("a", ref),
            lambda: api.rename("a", ref, "x"),
            lambda: api.write_file("a", ref, "x"),
            lambda: api.move("a", ref, "/y"),
            lambda: api.listdir("a", ref),
        ):
            with pytest.raises(InvalidName):
                call()
        # A node id that merely contains dots is an ordinary (missing) id.
        with pytest.raises(NotFound):
            api.delete("a", "...")
    assert "a" in coord.namespaces()
    assert coord.stat("a", "/f").content == "kept"


@pytest.mark.parametrize("ns", ["..", "."])
def test_client_refuses_dot_segment_namespaces(
    live_server: LiveServer, keys: Keys, coord: Coordinator, ns: str
) -> None:
    with Client(live_server.url, keys.admin, retries=0) as api:
        with pytest.raises(InvalidRequest):
            api.drop_namespace(ns)
        with pytest.raises(InvalidRequest):
            api.mkdir(ns, "/x")
    assert set(coord.namespaces()) >= {"a", "b"}


def test_empty_namespace_survives_client_delete_of_dotdot(
    live_server: LiveServer, keys: Keys, coord: Coordinator
) -> None:
    """The attack as reported: an admin key, an empty namespace, ``delete(ns, "..")``."""
    with Client(live_server.url, keys.admin, retries=0) as api:
        with pytest.raises(InvalidName):
            api.delete("a", "..")
    assert "a" in coord.namespaces()


@pytest.mark.parametrize("segment", [
    "..", ".", "%2E%2E", "%2e%2E", "%2E", ".%2E", "x%2Fchildren", "x%2fchildren",
])
def test_server_refuses_dot_segments_sent_raw(
    live_server: LiveServer, keys: Keys, coord: Coordinator, segment: str
) -> None:
    """A client that sends the segment as is (http.client does not normalise)."""
    coord.mkdir("a", "/x")
    node_id = coord.stat("a", "/x").id
    for method, url in (
        ("DELETE", f"/v1/namespaces/a/nodes/{segment}"),
        ("DELETE", f"/v1/namespaces/a/nodes/{segment}/{segment}"),
        ("DELETE", f"/v1/namespaces/{segment}"),
        ("GET", f"/v1/namespaces/a/nodes/{node_id}/{segment}"),
        ("GET", f"/v1/namespaces/a/{segment}/nodes/{node_id}"),
        ("DELETE", f"/v1/namespaces/a/nodes/{node_id}/children/{segment}"),
    ):
        conn = http.client.HTTPConnection("127.0.0.1", live_server.port, timeout=10)
        try:
            conn.request(method, url, headers=Keys.h(keys.admin))
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        assert resp.status == 400, (method, url, resp.status, body[:300])
        assert b'"invalid_request"' in body, body
    assert "a" in coord.namespaces()
    assert coord.stat("a", "/x").id == node_id


def test_server_accepts_dots_inside_segments(
    live_server: LiveServer, keys: Keys, coord: Coordinator
) -> None:
    """Only whole ``.``/``..`` segments are refused: ``a.b`` and ``...`` are names."""
    coord.create_namespace("v1.2")
    conn = http.client.HTTPConnection("127.0.0.1", live_server.port, timeout=10)
    try:
        conn.request("GET", "/v1/namespaces/v1.2/node?path=/", headers=Keys.h(keys.admin))
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()[:300]
        resp.read()
        conn.request("GET", "/v1/namespaces/v1.2/nodes/...", headers=Keys.h(keys.admin))
        resp = conn.getresponse()
        assert resp.status == 404, resp.read()[:300]
        resp.read()
    finally:
        conn.close()
