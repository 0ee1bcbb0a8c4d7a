"""The bytes of a ``_bulk`` request (``indexer.bulk.encode``, ``encoded_chunks``):
each action serialised once, to the lines the clients' helpers would have sent."""

from __future__ import annotations

import json

from coordinator import Node
from indexer.bulk import action_bytes, encode, encoded_chunks
from indexer.contract import bulk_lines, delete_action, index_action

ROOT = "00000000-0000-4000-8000-000000000000"


def file_node(i: int, content: str = "", metadata: dict[str, object] | None = None) -> Node:
    return Node(id=f"00000000-0000-4000-8000-{i:012d}", namespace="t", parent_id=ROOT,
                name=f"f{i}", kind="file", version=1, path=f"/d/f{i}", content=content,
                metadata=metadata or {})


def test_an_action_is_its_bulk_lines_as_ndjson() -> None:
    action = index_action("pk", file_node(1, "héllo ✓", {"n": 1, "deep": {"x": [1, None]}}), 7)
    body = encode(action)
    assert body.endswith(b"\n")
    lines = body.split(b"\n")[:-1]
    assert [json.loads(line) for line in lines] == bulk_lines(action)
    # Text goes as UTF-8, not as \u escapes (the size the server counts).
    assert "héllo ✓".encode() in body
    assert action_bytes(action) == len(body)


def test_a_delete_is_one_line() -> None:
    action = delete_action("pk", "t", "id-1", 9)
    assert encode(action) == (
        b'{"delete":{"_index":"pk","_id":"id-1","routing":"t","version":9,'
        b'"version_type":"external"}}\n'
    )


def test_metadata_the_fast_encoder_refuses_is_still_sent_whole() -> None:
    # JSON allows integers of any size; a node's metadata may hold one.
    big = 2**70
    action = index_action("pk", file_node(2, metadata={"big": big}), 3)
    source = json.loads(encode(action).split(b"\n")[1])
    assert source["metadata"] == {"big": big}


def test_chunks_by_count_and_by_bytes_an_oversized_action_alone() -> None:
    actions = [index_action("pk", file_node(i, "x" * 10), 1) for i in range(5)]
    one = action_bytes(actions[0])
    by_count = list(encoded_chunks(actions, 2, 10**6))
    assert [len(c) for c in by_count] == [2, 2, 1]
    by_bytes = list(encoded_chunks(actions, 100, 2 * one))
    assert [len(c) for c in by_bytes] == [2, 2, 1]
    huge = index_action("pk", file_node(9, "y" * 5000), 1)
    alone = list(encoded_chunks([actions[0], huge, actions[1]], 100, 3 * one))
    assert [[a["_id"] for a, _ in c] for c in alone] == [
        [actions[0]["_id"]], [huge["_id"]], [actions[1]["_id"]]]
    assert all(body == encode(a) for c in by_count for a, body in c)
