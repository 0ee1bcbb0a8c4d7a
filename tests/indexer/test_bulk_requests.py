"""The ``_bulk`` requests the indexer sends (``indexer.bulk``: each action serialised
once, requests of those bytes), checked against the real search server: what is
stored is the contract's document byte for byte in meaning, and the answers are
sorted out per item (written, already newer, rejected) in every chunk."""

from __future__ import annotations

from coordinator import Node
from indexer import elasticsearch_index
from indexer.bulk import Rejected, send, send_request
from indexer.contract import delete_action, document_for, index_action
from indexer.search_engine import SearchEngine

ROOT = "00000000-0000-4000-8000-000000000000"


def node(i: int, **fields: object) -> Node:
    values: dict[str, object] = {
        "id": f"00000000-0000-4000-8000-{i:012d}", "namespace": "bulk", "parent_id": ROOT,
        "name": f"f{i}", "kind": "file", "version": 1, "path": f"/d/f{i}",
        "content": f"body {i}", "metadata": {},
    }
    values.update(fields)
    return Node(**values)  # type: ignore[arg-type]


def stored(es: SearchEngine, alias: str, n: Node) -> dict[str, object]:
    got = es.get(index=alias, id=n.id, routing=n.namespace, realtime=True)
    return dict(got["_source"])


def test_documents_are_stored_as_the_contract_writes_them(es: SearchEngine, alias: str) -> None:
    elasticsearch_index.ensure_alias(es, alias)
    odd = [
        node(1, name="héllo ✓ 日本", path="/d/héllo ✓ 日本", content="naïve \u2028 \"q\" \\ \x01"),
        # JSON numbers of any size: the fast encoder refuses this one, the body keeps it.
        node(2, metadata={"big": 2**70, "neg": -(2**65), "f": 1.5, "deep": {"l": [None, True]}}),
        node(3, kind="dir", content=None, metadata={"ключ": "значение"}),
    ]
    plain = [node(i) for i in range(4, 12)]
    rejected: list[Rejected] = []
    # Chunks of 3: answers of several requests, in order, each tied to its action.
    stats = send(es, [index_action(alias, n, 5) for n in odd + plain], rejected.append,
                 chunk_size=3)
    assert (stats.indexed, stats.rejected, rejected) == (11, 0, [])
    for n in odd + plain:
        assert stored(es, alias, n) == document_for(n, 5)


def test_answers_per_item_across_chunks(es: SearchEngine, alias: str) -> None:
    elasticsearch_index.ensure_alias(es, alias)
    nodes = [node(i) for i in range(1, 8)]
    assert send(es, [index_action(alias, n, 10) for n in nodes], _fail).indexed == 7
    bad = index_action(alias, node(20), 10)
    bad["_source"] = {**bad["_source"], "not_in_mapping": 1}  # dynamic: strict refuses it
    actions = [
        index_action(alias, nodes[0], 9),   # older than what is stored: already newer
        index_action(alias, nodes[1], 11),  # newer: written
        bad,
        delete_action(alias, "bulk", nodes[2].id, 12),
        delete_action(alias, "bulk", node(21).id, 12),  # nothing there: still deleted
        index_action(alias, nodes[3], 10),  # the same version again: already applied
    ]
    rejected: list[Rejected] = []
    stats = send(es, actions, rejected.append, chunk_size=2)
    assert (stats.indexed, stats.already_newer, stats.deleted, stats.rejected) == (1, 2, 2, 1)
    assert [(r.node_id, r.status) for r in rejected] == [(node(20).id, 400)]
    assert rejected[0].document == bad["_source"]
    assert stored(es, alias, nodes[1])["seq"] == 11

    # The node lane's one-request form, the same actions again: every write and both
    # deletes (their tombstones) are there already; the bad document is refused again.
    rejected.clear()
    again = send_request(es, actions, rejected.append)
    assert (again.indexed, again.already_newer, again.deleted, again.rejected) == (0, 5, 0, 1)
    assert [(r.node_id, r.status) for r in rejected] == [(node(20).id, 400)]


def _fail(r: Rejected) -> None:
    raise AssertionError(f"rejected: {r}")
