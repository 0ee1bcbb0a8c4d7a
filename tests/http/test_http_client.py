"""pathkeeper.client.Client: the Coordinator's method names, results and error types over
HTTP, and retries that reuse the Idempotency-Key."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx
import pytest
from http_support import Keys, LiveServer

from coordinator import (
    AlreadyExists,
    Conflict,
    Coordinator,
    CoordinatorError,
    Copy,
    CreateFile,
    DirectoryNotEmpty,
    InvalidArgument,
    InvalidMove,
    InvalidName,
    InvalidPath,
    IsADirectory,
    MergeMetadata,
    Mkdir,
    NotADirectory,
    NotFound,
    Rename,
    SetMetadata,
)
from coordinator.results import POSITION_BLOCK, SearchHit, SearchPage
from indexer.worker import Worker
from pathkeeper.client import Client, Forbidden, Unauthorized
from pathkeeper.http.app import create_app
from pathkeeper.http.settings import ServiceSettings


def scenario(api: Any, ns: str) -> list[Any]:
    """The same calls on a Coordinator or a Client; returns comparable outcomes."""
    out: list[Any] = []

    def attempt(fn: Callable[[], Any]) -> None:
        try:
            value = fn()
        except CoordinatorError as exc:
            out.append(type(exc))
            return
        if hasattr(value, "node"):
            value = (value.node.path, value.node.kind, value.node.version, value.seq is None)
        elif hasattr(value, "path"):
            value = (value.path, value.kind, value.version, value.content, value.metadata)
        elif isinstance(value, list):
            value = [v if isinstance(v, str) else getattr(v, "path", None)
                     or v.node.path for v in value]
        out.append(value)

    attempt(lambda: api.mkdir(ns, "/d"))
    attempt(lambda: api.mkdir(ns, "/d"))  # AlreadyExists
    attempt(lambda: api.mkdir(ns, "/d/x/y", parents=True))
    attempt(lambda: api.create_file(ns, "/d/f", "hello", {"k": "v"}))
    attempt(lambda: api.create_file(ns, "/d/f/g"))  # NotADirectory
    attempt(lambda: api.write_file(ns, "/d", "x"))  # IsADirectory
    attempt(lambda: api.write_file(ns, "/d/f", "v2", if_version=1))
    attempt(lambda: api.write_file(ns, "/d/f", "v3", if_version=1))  # Conflict
    attempt(lambda: api.stat(ns, "/d/f"))
    attempt(lambda: api.stat(ns, "/missing"))  # NotFound
    attempt(lambda: api.rename(ns, "/d", "e"))
    attempt(lambda: api.move(ns, "/e", "/e/x/inside"))  # InvalidMove
    attempt(lambda: api.set_metadata(ns, "/e", {"owner": "o"}))
    attempt(lambda: api.set_metadata(ns, "/e/f", {"k": 2}, if_version=1))  # Conflict
    attempt(lambda: api.set_metadata(ns, "/", {"k": 2}))  # InvalidArgument
    attempt(lambda: api.merge_metadata(ns, "/e", {"tag": 1, "owner": None}))
    attempt(lambda: api.stat(ns, "/e"))
    attempt(lambda: api.merge_metadata(ns, "/e", {"k": 2}, if_version=1))  # Conflict
    attempt(lambda: api.apply(ns, [MergeMetadata("/e", {"k": 3}), SetMetadata("/e", {})]))
    attempt(lambda: api.copy(ns, "/e", "/", "e2"))
    attempt(lambda: api.stat(ns, "/e2/f"))
    attempt(lambda: api.copy(ns, "/e", "/e/x"))  # InvalidMove
    attempt(lambda: api.copy(ns, "/e/f", "/e2"))  # AlreadyExists
    attempt(lambda: api.apply(ns, [Copy("/e/f", "/e2", "f3"), Rename("/e2/f3", "f4")]))
    attempt(lambda: api.delete(ns, "/e2", recursive=True))
    attempt(lambda: api.apply(ns, [SetMetadata("/e/f", {"k": 3}), Rename("/e/f", "f2"),
                                   Rename("/e/f2", "f")]))
    attempt(lambda: api.stat(ns, "/e"))
    attempt(lambda: api.stat(ns, "/e/f"))
    attempt(lambda: api.move(ns, "/e/f", "/f"))
    attempt(lambda: api.get(ns, api.stat(ns, "/f").id))
    attempt(lambda: api.listdir(ns, "/e"))
    attempt(lambda: api.listdir(ns, "/e", after="a", limit=1))
    attempt(lambda: api.rename(ns, "/f", "bad/name"))  # InvalidName
    attempt(lambda: api.mkdir(ns, "relative"))  # InvalidPath
    attempt(lambda: api.delete(ns, "/e"))  # DirectoryNotEmpty
    attempt(lambda: api.apply(ns, [Mkdir("/g"),
                                   Rename("/g", "h"),
                                   CreateFile("/h/i", "c")]))
    attempt(lambda: api.apply(ns, [Mkdir("/j"),
                                   Mkdir("/j")]))  # AlreadyExists, rolled back
    attempt(lambda: api.stat(ns, "/j"))  # NotFound
    attempt(lambda: api.delete(ns, "/e", recursive=True))
    attempt(lambda: [n.path for n in api.walk(ns)])
    attempt(lambda: api.drop_namespace(ns))  # DirectoryNotEmpty
    return out


def test_client_matches_coordinator(live_server: LiveServer, keys: Keys,
                                    coord: Coordinator) -> None:
    expected = scenario(coord, "a")
    with Client(live_server.url, api_key=keys.admin) as client:
        got = scenario(client, "b")
    assert got == expected
    for cls in (AlreadyExists, NotADirectory, IsADirectory, Conflict, NotFound, InvalidMove,
                InvalidName, InvalidPath, DirectoryNotEmpty, InvalidArgument):
        assert cls in got, cls


def test_client_auth_errors_and_batch_index(live_server: LiveServer, keys: Keys) -> None:
    with Client(live_server.url, api_key="pk_wrong") as client, pytest.raises(Unauthorized):
        client.stat("a", "/")
    with Client(live_server.url, api_key=keys.a_read) as client:
        with pytest.raises(Forbidden):
            client.mkdir("a", "/x")
        with pytest.raises(NotFound):
            client.stat("b", "/")  # not this key's namespace: as if it did not exist
    with Client(live_server.url, api_key=keys.a_write) as client:
        with pytest.raises(AlreadyExists) as info:
            client.apply("a", [Mkdir("/x"), Mkdir("/x")])
        assert info.value.index == 1  # type: ignore[attr-defined]
        events, _ = client.read_events(namespaces=["a"], wait=0)
        assert [e.type for e in events] == ["namespace_created"]
        assert client.wait_indexed(events[0].position, timeout=0.1) is False  # no indexer


class DropFirstResponse(httpx.HTTPTransport):
    """Delivers each mutation to the server, then loses the first answer (a timeout after
    the server applied it), as a flaky network does."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method in ("POST", "PUT", "DELETE"):
            self.keys.append(request.headers.get("Idempotency-Key"))
            if self.dropped == len(self.keys) - 1 and self.dropped < 3:
                response.read()
                response.close()
                self.dropped += 1
                raise httpx.ReadTimeout("lost answer", request=request)
        return response


def test_client_retry_reuses_idempotency_key(live_server: LiveServer, keys: Keys,
                                             coord: Coordinator) -> None:
    coord.create_file("a", "/f", "v1")
    transport = DropFirstResponse()
    with Client(live_server.url, api_key=keys.a_write, transport=transport) as client:
        written = client.write_file("a", "/f", "v2")
    assert transport.dropped == 3 and len(transport.keys) == 4
    assert len(set(transport.keys)) == 1 and transport.keys[0]
    assert written.node.version == 2  # applied once although sent four times
    assert coord.stat("a", "/f").version == 2
    events, _ = coord.read_events(namespaces=["a"])
    assert [e.type for e in events].count("written") == 1


def test_mutation_results_carry_the_version(live_server: LiveServer, keys: Keys,
                                            coord: Coordinator) -> None:
    with Client(live_server.url, api_key=keys.a_write) as client:
        made = client.create_file("a", "/v", "1")
        assert made.version == 1 == made.node.version
        assert client.write_file("a", "/v", "2").version == 2
        assert client.apply("a", [SetMetadata("/v", {"k": 1})])[0].version == 3
    assert coord.write_file("a", "/v", "4").version == 4  # the same in-process


def test_search_answers_typed_hits_and_pages(
    settings: ServiceSettings, es_url: str, alias: str, keys: Keys, worker: Worker
) -> None:
    from dataclasses import fields

    from pathkeeper.http.schemas import SearchHit as HitSchema

    # Every field the HTTP answer has, no more: the typed hit cannot drift from it.
    assert [f.name for f in fields(SearchHit)] == list(HitSchema.model_fields)
    with (LiveServer(create_app(replace(settings, es_url=es_url, index_alias=alias)))
          as server, Client(server.url, api_key=keys.a_write) as client):
        client.mkdir("a", "/docs")
        for i in range(3):
            client.create_file("a", f"/docs/n{i}.txt", "hello typed world")
        seq = client.create_file("a", "/other.txt", "nothing here").seq
        assert seq is not None
        page = client.search("a", "typed", under="/docs", limit=2, min_seq=seq)
        assert isinstance(page, SearchPage) and page.cursor is not None
        assert all(isinstance(h, SearchHit) for h in page.hits) and len(page.hits) == 2
        rest = client.search("a", "typed", under="/docs", limit=2, cursor=page.cursor)
        assert rest.cursor is None
        found = sorted(h.path for h in [*page.hits, *rest.hits])
        assert found == ["/docs/n0.txt", "/docs/n1.txt", "/docs/n2.txt"]
        hit = rest.hits[0]
        assert hit.kind == "file" and hit.name == hit.path.rsplit("/", 1)[1]
        assert hit.node_id == client.stat("a", hit.path).id and hit.seq > 0
        assert isinstance(hit.score, float)


def test_transaction_sends_its_commands_in_one_request_all_or_nothing(
    live_server: LiveServer, keys: Keys, coord: Coordinator
) -> None:
    sent: list[str] = []
    with Client(live_server.url, api_key=keys.a_write) as client:
        client.http.event_hooks["request"].append(lambda r: sent.append(f"{r.method} "
                                                                        f"{r.url.path}"))
        with client.transaction("a") as tx:
            made = tx.mkdir("/t")
            tx.create_file("/t/f", "x")
            tx.rename("/t", "u")
            assert sent == [] and made.result is None  # nothing sent inside the block
        assert sent == ["POST /v1/namespaces/a/batch"]
        assert [r.node.path for r in tx.results] == ["/t", "/t/f", "/u"]
        assert made.result is tx.results[0]
        blocks = {r.seq // POSITION_BLOCK for r in tx.results if r.seq is not None}
        assert len(blocks) == 1  # one transaction
        assert coord.stat("a", "/u/f").content == "x"

        # A failing command: nothing of the group applied; its position in .index.
        with pytest.raises(AlreadyExists) as info, client.transaction("a") as tx:
            tx.mkdir("/v")
            tx.mkdir("/v")
        assert info.value.index == 1  # type: ignore[attr-defined]
        with pytest.raises(NotFound):
            coord.stat("a", "/v")

        # An exception inside the block: nothing is sent at all.
        sent.clear()
        with pytest.raises(RuntimeError), client.transaction("a") as tx:
            tx.mkdir("/w")
            raise RuntimeError("changed my mind")
        assert sent == []
        with pytest.raises(NotFound):
            coord.stat("a", "/w")
        with client.transaction("a"):
            pass  # an empty group sends nothing
        assert sent == []
