"""Replay's documents come from the fold as PostgreSQL rendered them: no ``Node`` is built
per folded row, whole or in parts, and the index it builds holds the reference
documents (``contract.document_for`` of the live nodes, field for field and type for
type, ``seq`` included), for nodes of every shape: files with and without content,
metadata beyond 64 bits, a write that kept the metadata before it, paths deeper than the
fold's first walk, from the log alone or from a snapshot plus the events after it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from nodes_built import count_nodes_built

from coordinator import Coordinator
from indexer import replay_sources, setfold
from indexer.contract import document_for
from indexer.live_nodes import walk_nodes
from indexer.replay import rebuild
from indexer.retention import take_snapshot
from indexer.search_engine import SearchEngine


def canonical(docs: dict[str, Any]) -> str:
    """Equal only if every value and its type (an integer is not a float) are."""
    return json.dumps(docs, sort_keys=True, ensure_ascii=False)


def _history(coord: Coordinator, snapshot_halfway: bool) -> None:
    coord.create_namespace("u")
    top = "/caf\u00e9/\u0434\u0435\u0440\u0435\u0432\u043e/\U0001f333 deep"
    coord.mkdir("u", top, parents=True)
    deep = top
    for depth in range(setfold.SHALLOW + 4):  # past the fold's first walk
        deep += f"/l{depth}"
        coord.mkdir("u", deep)
    coord.create_file("u", deep + "/f\"q\\u", "line 1\nline \u00e9 2\t\u0001",
                      metadata={"big": 2**80, "neg": -(2**70), "pi": 3.14159, "e": 1e-7,
                                "nested": {"a": [1, {"b": None}], "t": True}})
    coord.create_file("u", "/caf\u00e9/empty")  # no content
    coord.mkdir("u", "/caf\u00e9/meta")
    if snapshot_halfway:
        take_snapshot(coord.engine)
    coord.set_metadata("u", "/caf\u00e9/meta", {"k": "v", "n": [1.0, 2]})
    coord.create_file("u", "/caf\u00e9/kept", "v1", metadata={"owner": "ops"})
    coord.write_file("u", "/caf\u00e9/kept", "v2")  # no metadata: the one before stays
    coord.rename("u", "/caf\u00e9/\u0434\u0435\u0440\u0435\u0432\u043e", "tree")
    coord.create_namespace("v")
    coord.create_file("v", "/only", "x")


@pytest.mark.parametrize(("parts", "snapshot_halfway"),
                         [(1, False), (3, False), (1, True)])
def test_replay_builds_no_node_per_document(
    coord: Coordinator, es: SearchEngine, alias: str, monkeypatch: pytest.MonkeyPatch,
    parts: int, snapshot_halfway: bool,
) -> None:
    _history(coord, snapshot_halfway)
    built = count_nodes_built(monkeypatch, setfold)
    monkeypatch.setattr(replay_sources, "fold_parts", lambda engine: parts)
    result = rebuild(coord, es, source="events", alias=alias)
    assert built == []
    monkeypatch.undo()
    want: dict[str, Any] = {}
    with coord.engine.connect() as conn:
        for ns in ("u", "v"):
            want.update({n.id: document_for(n, result.position) for n in walk_nodes(conn, ns)
                         if n.parent_id is not None})
    assert result.swapped and result.documents == len(want) == 4 + setfold.SHALLOW + 4 + 4
    es.refresh(alias)
    got: dict[str, Any] = {}
    for ns in ("u", "v"):
        hits = es.search(alias, {"query": {"match_all": {}}, "size": 100}, routing=ns)
        got.update({h["_id"]: h["_source"] for h in hits["hits"]["hits"]})
    assert canonical(got) == canonical(want)
