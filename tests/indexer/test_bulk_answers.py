"""The ``_bulk`` answers the indexer asks for (``indexer.bulk.ANSWER_FILTER``): only
what it reads of them, checked on the real search server by the bytes the client
receives (a hook on the client's connection to the node records them), and every
outcome still counted right through the filtered answers: writes and deletes of an
answer without errors (counted from the actions alone), conflicts (409), rejections
(mapping errors, dead letters with their error text) and deletes of absent documents
(404), in every form of sending (``send``, ``send_request``, ``send_chunks``, a
replay's ``stream_answers``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

from elasticsearch import Elasticsearch
from opensearchpy import OpenSearch

from coordinator import Node
from indexer import elasticsearch_index
from indexer.bulk import (
    BulkStats,
    Rejected,
    encoded_chunks,
    send,
    send_chunks,
    send_request,
    stream_answers,
)
from indexer.contract import delete_action, index_action
from indexer.search_engine import SearchEngine

ROOT = "00000000-0000-4000-8000-000000000000"


def node(i: int) -> Node:
    return Node(id=f"00000000-0000-4000-8000-{i:012d}", namespace="answers", parent_id=ROOT,
                name=f"f{i}", kind="file", version=1, path=f"/d/f{i}", content=f"body {i}",
                metadata={})


@contextmanager
def answer_bytes(es: SearchEngine) -> Iterator[list[tuple[str, int]]]:
    """(request target, bytes of the answer as received) of each ``_bulk`` request
    the client sends meanwhile: a hook on each of the client's connections to the nodes
    (Elasticsearch's transport or opensearch-py's, whichever the engine is)."""
    engine: Any = es  # the seam, or the adapter it hands calls to
    client = engine.client
    seen: list[tuple[str, int]] = []
    if isinstance(client, Elasticsearch):
        conns: list[Any] = list(client.transport.node_pool.all())

        def hook(perform: Any) -> Any:
            def recording(method: str, target: str, *args: Any, **kwargs: Any) -> Any:
                resp = perform(method, target, *args, **kwargs)
                if "_bulk" in target:
                    seen.append((target, len(resp.body)))
                return resp
            return recording
    else:
        assert isinstance(client, OpenSearch)
        conns = list(client.transport.connection_pool.connections)

        def hook(perform: Any) -> Any:
            def recording(method: str, url: str, params: Any = None, *args: Any,
                          **kwargs: Any) -> Any:
                status, headers, data = perform(method, url, params, *args, **kwargs)
                if "_bulk" in url:
                    seen.append((f"{url}?{urlencode(params or {})}",
                                 len(data.encode() if isinstance(data, str) else data)))
                return status, headers, data
            return recording
    for conn in conns:
        conn.perform_request = hook(conn.perform_request)
    try:
        yield seen
    finally:
        for conn in conns:
            del conn.perform_request


def test_a_bulk_answer_carries_only_what_is_read(es: SearchEngine, alias: str) -> None:
    elasticsearch_index.ensure_alias(es, alias)
    actions = [index_action(alias, node(i), 3) for i in range(1, 501)]
    with answer_bytes(es) as seen:
        stats = send_request(es, actions, _fail)
    assert (stats.indexed, stats.total) == (500, 500)
    [(target, filtered)] = seen
    assert "filter_path=" in target
    # The same 500 writes answered whole (a request the indexer does not make).
    body = b"".join(
        b'{"index":{"_index":"%s","_id":"%d","routing":"answers"}}\n{"name":"x"}\n'
        % (alias.encode(), i) for i in range(1, 501))
    elasticsearch_index.ensure_alias(es, alias)
    with answer_bytes(es) as seen:
        es.bulk(operations=body)
    [(_target, whole)] = seen
    assert filtered < whole / 4, (filtered, whole)
    assert filtered / 500 < 40


def test_outcomes_are_counted_through_filtered_answers(es: SearchEngine, alias: str) -> None:
    elasticsearch_index.ensure_alias(es, alias)
    nodes = [node(i) for i in range(1, 11)]
    # No errors: counted from the actions' ops, writes and deletes apart.
    first = [index_action(alias, n, 10) for n in nodes]
    # The last request: deletes only, one of a document never written (a 404 that is
    # no failure: the answer says errors: false).
    first += [delete_action(alias, "answers", nodes[0].id, 11),
              delete_action(alias, "answers", nodes[1].id, 11),
              delete_action(alias, "answers", node(99).id, 11)]
    with answer_bytes(es) as seen:
        stats = send(es, first, _fail, chunk_size=5)
    assert (stats.indexed, stats.deleted, stats.total) == (10, 3, 13)
    assert len(seen) == 3 and all("filter_path=" in target for target, _ in seen)

    bad = index_action(alias, node(20), 12)
    bad["_source"] = {**bad["_source"], "not_in_mapping": 1}  # dynamic: strict refuses it

    def mixed(absent: int) -> list[dict[str, Any]]:
        return [
            index_action(alias, nodes[2], 9),    # older than stored: 409, already newer
            index_action(alias, nodes[3], 12),   # written
            bad,                                 # mapping error: a dead letter
            delete_action(alias, "answers", node(absent).id, 12),  # absent: 404, deleted
            delete_action(alias, "answers", nodes[4].id, 12),  # deleted
        ]

    expected = (1, 2, 1, 1)  # (indexed, deleted, already newer, rejected)

    def counts(s: BulkStats) -> tuple[int, int, int, int]:
        return s.indexed, s.deleted, s.already_newer, s.rejected

    for absent, how in enumerate(("send", "send_request", "send_chunks"), start=30):
        actions = mixed(absent)
        rejected: list[Rejected] = []
        with answer_bytes(es) as seen:
            if how == "send":
                got = send(es, actions, rejected.append, chunk_size=2)
            elif how == "send_request":
                got = send_request(es, actions, rejected.append)
            else:
                got = send_chunks(es, encoded_chunks(actions, 2, 1 << 20), rejected.append)
        assert seen and all("filter_path=" in target for target, _ in seen)
        assert counts(got) == expected, how
        assert [(r.node_id, r.status) for r in rejected] == [(node(20).id, 400)], how
        assert "strict_dynamic_mapping_exception" in rejected[0].error, rejected[0].error
        assert "not_in_mapping" in rejected[0].error
        assert rejected[0].document == bad["_source"]
        # Once applied, the write and the delete answer 409 (the delete's tombstone
        # stays): already newer.
        expected = (0, 1, 3, 1)

    # A replay's and a repair's form: per request, what failed with its op and status.
    outcomes: list[tuple[str, int]] = []
    written = 0
    for answer in stream_answers(es, mixed(40), [], chunk_size=10, max_chunk_bytes=1 << 20):
        indexed, deleted, failed = answer.tally()
        written += indexed + deleted
        outcomes += [(op, int(info["status"])) for _a, op, info in failed]
    assert written == 0
    assert sorted(outcomes) == [("delete", 404), ("delete", 409), ("index", 400),
                                ("index", 409), ("index", 409)]


def _fail(r: Rejected) -> None:
    raise AssertionError(f"rejected: {r}")
