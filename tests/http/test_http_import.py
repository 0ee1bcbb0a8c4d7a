"""Issue 15: ``POST /v1/namespaces/{ns}/import`` streams JSON Lines into one import, on a
real uvicorn server (chunked body larger than the buffered-body cap)."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

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


def slow_lines(n: int, pause: float) -> Iterator[str]:
    for i in range(n):
        time.sleep(pause)
        yield json.dumps({"path": f"/s/f{i}", "kind": "file"})


def test_an_upload_slower_than_the_statement_timeout_still_imports(
    settings: ServiceSettings, keys: Keys, coord: Coordinator
) -> None:
    """The request's statement timeout (0.5 s here) is for short requests: an import,
    whose COPY lasts as long as its upload, runs under the import's own timeout."""
    with LiveServer(create_app(replace(settings, statement_timeout_seconds=0.5))) as server, \
            Client(server.url, api_key=keys.a_write) as client:
        out = client.import_nodes("a", slow_lines(5, 0.3))
    assert out["created"] == 6
    assert coord.stat("a", "/s/f4").kind == "file"


def post_chunked(port: int, key: str, pieces: list[tuple[float, bytes]],
                 wait: float = 20.0) -> tuple[int, dict[str, str], dict[str, Any], float]:
    """POST an import as chunks, each after its pause, over a raw socket (a client that
    stalls or trickles); stop sending once the server answers. Returns the status, the
    headers, the JSON body and the seconds until the answer."""
    sock = socket.create_connection(("127.0.0.1", port))
    started = time.monotonic()
    sock.sendall((f"POST /v1/namespaces/a/import HTTP/1.1\r\nHost: x\r\n"
                  f"Authorization: Bearer {key}\r\nContent-Type: application/x-ndjson\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n").encode())
    for pause, data in pieces:
        if select.select([sock], [], [], pause)[0]:
            break  # the server answered already
        sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))
    sock.settimeout(wait)
    raw = b""
    while b"\r\n\r\n" not in raw:
        raw += sock.recv(65536)
    answered = time.monotonic() - started
    head, _, rest = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    while len(rest) < int(headers["content-length"]):
        rest += sock.recv(65536)
    sock.close()
    return int(status_line.split()[1]), headers, json.loads(rest), answered


def test_a_stalled_upload_ends_with_408(settings: ServiceSettings, keys: Keys,
                                        coord: Coordinator) -> None:
    """A client that stops sending mid-import: after the body timeout without data the
    import ends, 408, nothing written, the connection closed and its slot and database
    connection given back (a next import works)."""
    line = b'{"path": "/s", "kind": "dir"}\n'
    with LiveServer(create_app(replace(settings, body_timeout_seconds=1.0))) as server:
        status, headers, body, answered = post_chunked(
            server.port, keys.a_write, [(0, line), (30, line)])
        assert status == 408, body
        assert headers.get("connection") == "close"
        assert 1.0 <= answered < 10
        assert {n.path for n in coord.walk("a")} == {"/"}
        with Client(server.url, api_key=keys.a_write) as client:
            assert client.import_nodes("a", [line.decode()])["created"] == 1


def test_an_upload_past_the_import_timeout_ends_with_503(settings: ServiceSettings,
                                                         keys: Keys,
                                                         coord: Coordinator) -> None:
    """A client that keeps sending, slowly, past ``import_timeout_seconds``: the import
    ends with 503 and Retry-After (whichever of the server's deadline and PostgreSQL's
    statement timeout comes first), nothing written."""
    lines = [(0.25, json.dumps({"path": f"/t/f{i}", "kind": "file"}).encode() + b"\n")
             for i in range(40)]
    with LiveServer(create_app(replace(settings, import_timeout_seconds=1.0))) as server:
        status, headers, body, answered = post_chunked(server.port, keys.a_write, lines)
    assert status == 503, body
    assert body["error"]["code"] == "unavailable"
    assert "import did not finish within 1 s" in body["error"]["message"]
    assert headers["retry-after"] == "1" and 1.0 <= answered < 8
    assert {n.path for n in coord.walk("a")} == {"/"}
