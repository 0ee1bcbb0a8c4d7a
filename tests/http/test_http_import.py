"""Issue 15: ``POST /v1/namespaces/{ns}/import`` streams JSON Lines into one import, on a
real uvicorn server (chunked body larger than the buffered-body cap)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
from http_support import Keys, LiveServer

from coordinator import AlreadyExists, Coordinator, InvalidImport
from pathkeeper.client import Client, Forbidden
from pathkeeper.http.app import create_app
from pathkeeper.http.settings import ServiceSettings


def lines(n: int, pad: int = 0) -> Iterator[str]:
    for i in range(n):
        yield json.dumps({"path": f"/d{i % 7}/f{i}", "kind": "file", "content": "x" * pad})


def test_streamed_import_larger_than_the_body_cap(live_server: LiveServer, keys: Keys,
                                                  coord: Coordinator) -> None:
    # 3,000 lines of 4 KB: 12 MB, past the 8 MB cap of buffered bodies.
    with Client(live_server.url, api_key=keys.a_write) as client:
        out = client.import_nodes("a", lines(3000, pad=4000))
    assert out["created"] == 3007 and out["implied_dirs"] == 7
    assert out["last_seq"] - out["first_seq"] == 3006
    assert coord.stat("a", "/d3/f10").content == "x" * 4000


def test_bad_lines_come_back_with_their_numbers(live_server: LiveServer, keys: Keys,
                                                coord: Coordinator) -> None:
    with Client(live_server.url, api_key=keys.a_write) as client:
        try:
            client.import_nodes("a", ['{"path": "/ok", "kind": "dir"}', "{nope"])
        except InvalidImport as exc:
            assert exc.lines[0][0] == 2 and "not valid JSON" in exc.lines[0][1]
            assert exc.status == 422  # type: ignore[attr-defined]
        else:
            raise AssertionError("the import was accepted")
        client.import_nodes("a", ['{"path": "/ok", "kind": "dir"}'])
        try:
            client.import_nodes("a", ['{"path": "/ok", "kind": "dir"}'])
        except AlreadyExists as exc:
            assert exc.lines == ((1, "/ok already exists"),)
        else:
            raise AssertionError("the import was accepted")
    assert {n.path for n in coord.walk("a")} == {"/", "/ok"}


def test_import_needs_write_scope_on_the_namespace(live_server: LiveServer,
                                                    keys: Keys) -> None:
    with Client(live_server.url, api_key=keys.a_read) as client:
        try:
            client.import_nodes("a", ['{"path": "/x", "kind": "dir"}'])
        except Forbidden:
            pass
        else:
            raise AssertionError("a read key imported")
    r = httpx.post(f"{live_server.url}/v1/namespaces/b/import",
                   headers={"Authorization": f"Bearer {keys.a_write}"},
                   content=b'{"path": "/x", "kind": "dir"}\n')
    assert r.status_code == 404


def test_a_line_past_the_line_limit_is_refused_with_413(settings: ServiceSettings,
                                                        keys: Keys, coord: Coordinator) -> None:
    """The server reads one line at a time and refuses one longer than the coordinator's
    ``max_import_line_bytes`` (here 1,000) with its number, nothing written."""
    small = settings.with_coordinator(max_import_line_bytes=1000)
    long = json.dumps({"path": "/big", "kind": "file", "content": "x" * 1000})
    with LiveServer(create_app(small)) as server:
        r = httpx.post(f"{server.url}/v1/namespaces/a/import",
                       headers={"Authorization": f"Bearer {keys.a_write}"},
                       content=('{"path": "/ok", "kind": "dir"}\n' + long + "\n").encode())
    assert r.status_code == 413, r.text
    error = r.json()["error"]
    assert error["code"] == "too_large"
    assert error["lines"] == [
        {"line": 2, "message": "longer than 1,000 bytes (the import's line limit)"}]
    assert {n.path for n in coord.walk("a")} == {"/"}


def test_deeply_nested_metadata_is_refused_like_a_create(live_server: LiveServer,
                                                         keys: Keys, coord: Coordinator) -> None:
    """Metadata nested past the limit: 422 ``invalid_content`` from the import (with the
    line's number) as from a create, whether or not a recursive parser could read it."""
    headers = {"Authorization": f"Bearer {keys.a_write}"}
    for levels, what in ((101, "metadata"), (2000, "JSON")):
        md = '{"a": ' * (levels - 1) + "{}" + "}" * (levels - 1)
        r = httpx.post(f"{live_server.url}/v1/namespaces/a/import", headers=headers,
                       content=('{"path": "/ok", "kind": "dir"}\n{"path": "/d", "kind": '
                                f'"dir", "metadata": {md}}}\n').encode())
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["code"] == "invalid_content"
        assert error["lines"] == [{"line": 2, "message": f"{what} nested deeper than 100 "
                                                        "levels"}]
    for levels, what in ((150, "metadata"), (2000, "JSON")):
        md = '{"a": ' * levels + "{}" + "}" * levels
        r = httpx.post(f"{live_server.url}/v1/namespaces/a/files",
                       headers={**headers, "Content-Type": "application/json"},
                       content=f'{{"path": "/f", "metadata": {md}}}'.encode())
        assert r.status_code == 422, r.text
        assert r.json()["error"] == {
            "code": "invalid_content", "message": f"{what} nested deeper than 100 levels"}
    assert {n.path for n in coord.walk("a")} == {"/"}
