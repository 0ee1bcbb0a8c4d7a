"""Documents rendered by PostgreSQL (``indexer.contract.index_entry_sql``, the worker's
production path) against the reference, ``document_for``: the same document, field for
field and type for type, for nodes of every shape; and the worker's read of a batch
builds no ``Node`` per document."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nodes_built import count_nodes_built
from sqlalchemy import Connection, text

from coordinator import Coordinator, Node
from indexer import elasticsearch_index, live_nodes
from indexer.applier import Applier, SubtreeWork
from indexer.bulk import Rejected, encode, send, send_request
from indexer.contract import (
    bulk_lines,
    document_for,
    index_action,
    index_entry_sql,
    rendered_action,
)
from indexer.live_nodes import (
    fetch_entries,
    fetch_nodes,
    stream_subtree_entries,
    walk_entries,
    walk_nodes,
)
from indexer.plan import plan_batch
from indexer.replay import rebuild
from indexer.search_engine import SearchEngine

_RENDER = text(
    "SELECT "
    + index_entry_sql("CAST(:index AS text)", "n", "CAST(:path AS text)",
                      "CAST(:seq AS bigint)", "CAST(:ns AS text)")
    + " AS entry, n.metadata FROM (SELECT CAST(:id AS uuid) AS id, "
    "CAST(:parent_id AS uuid) AS parent_id, CAST(:name AS text) AS name, "
    "CAST(:kind AS text) AS kind, CAST(:content AS text) AS content, "
    "CAST(:metadata AS jsonb) AS metadata) n"
)


def canonical(lines: list[Any]) -> str:
    """Lines as JSON with sorted keys: equal only if every value and its type (an integer
    is not a float) are."""
    return json.dumps(lines, sort_keys=True, ensure_ascii=False)


def parsed(entry: bytes) -> list[Any]:
    assert entry.endswith(b"\n")
    lines = entry.split(b"\n")[:-1]
    assert len(lines) == 2, "a newline in a value must be escaped"
    return [json.loads(line) for line in lines]


# PostgreSQL text holds no NUL, and a name no "/"; anything else goes (any script,
# combining marks, both normal forms, controls, quotes and backslashes, emoji).
_TEXT = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
names = st.text(_TEXT.filter(lambda c: c != "/"), min_size=1, max_size=12)
json_values = st.recursive(
    st.none() | st.booleans()
    | st.integers(min_value=-(2**100), max_value=2**100)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(_TEXT, max_size=10),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(_TEXT, max_size=6), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture
def conn(coord: Coordinator) -> Iterator[Connection]:
    with coord.engine.connect() as c:
        yield c


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(["file", "dir"]),
    parts=st.lists(names, min_size=1, max_size=40),
    namespace=names,
    metadata=st.dictionaries(st.text(_TEXT, max_size=8), json_values, max_size=6),
    content=st.none() | st.text(_TEXT, max_size=60),
    seq=st.integers(min_value=1, max_value=2**63 - 1),
)
def test_postgres_renders_the_reference_document(
    conn: Connection, kind: str, parts: list[str], namespace: str,
    metadata: dict[str, Any], content: str | None, seq: int,
) -> None:
    node_id, parent_id, path = str(uuid.uuid4()), str(uuid.uuid4()), "/" + "/".join(parts)
    if kind == "dir":
        content = None
    row = conn.execute(_RENDER, {
        "index": "pk-nodes", "path": path, "seq": seq, "ns": namespace, "id": node_id,
        "parent_id": parent_id, "name": parts[-1], "kind": kind, "content": content,
        "metadata": json.dumps(metadata),
    }).one()
    # The reference reads the same row as the worker did before: metadata as psycopg
    # decodes the jsonb.
    node = Node(id=node_id, namespace=namespace, parent_id=parent_id, name=parts[-1],
                kind=kind, version=1, path=path, content=content, metadata=row.metadata)
    want = bulk_lines(index_action("pk-nodes", node, seq))
    entry = row.entry.encode()
    assert canonical(parsed(entry)) == canonical(want)
    action = rendered_action("pk-nodes", namespace, node_id, seq, entry)
    assert encode(action) == entry  # sent as PostgreSQL rendered it
    assert canonical(bulk_lines(action)) == canonical(want)


def test_a_namespace_root_renders_nothing(coord: Coordinator, conn: Connection) -> None:
    coord.create_namespace("r")
    root = conn.execute(text("SELECT CAST(id AS text) FROM nodes WHERE namespace = 'r' "
                             "AND parent_id IS NULL")).scalar_one()
    assert fetch_entries(conn, "pk", "r", [root], 5) == {root: None}
    # Ids that are no node's (a document written by hand may carry any): not found.
    assert fetch_entries(conn, "pk", "r", ["not-a-uuid", root.upper(), ""], 5) == {}


def _tree(coord: Coordinator) -> None:
    coord.create_namespace("u")
    coord.mkdir("u", "/caf\u00e9/\u0434\u0435\u0440\u0435\u0432\u043e/\U0001f333 deep",
                parents=True)
    deep = "/caf\u00e9/\u0434\u0435\u0440\u0435\u0432\u043e/\U0001f333 deep"
    for depth in range(30):
        deep += f"/l{depth}"
        coord.mkdir("u", deep)
    coord.create_file("u", deep + "/f\"q\\u", "line 1\nline \u00e9 2\t\u0001",
                      metadata={"big": 2**80, "neg": -(2**70), "pi": 3.14159, "e": 1e-7,
                                "huge": 1.5e300, "nested": {"a": [1, {"b": None}], "t": True}})
    coord.create_file("u", "/caf\u00e9/empty")  # null content
    coord.mkdir("u", "/caf\u00e9/meta")
    coord.set_metadata("u", "/caf\u00e9/meta", {"k": "v", "n": [1.0, 2]})


def test_live_rows_render_as_the_reference(coord: Coordinator, conn: Connection) -> None:
    _tree(coord)
    ids = list(conn.execute(text("SELECT CAST(id AS text) FROM nodes WHERE namespace = 'u' "
                                 "AND parent_id IS NOT NULL")).scalars())
    nodes = fetch_nodes(conn, "u", ids)
    entries = fetch_entries(conn, "pk", "u", ids, 77)
    assert entries.keys() == set(ids)
    for node_id in ids:
        entry = entries[node_id]
        assert entry is not None
        want = bulk_lines(index_action("pk", nodes[node_id], 77))
        assert canonical(parsed(entry)) == canonical(want)
    # The subtree stream renders the same documents at each node's write version.
    top = next(n for n in nodes.values() if n.path == "/caf\u00e9")
    seen = 0
    for node_id, version, entry in stream_subtree_entries(conn, "pk", top, 9, {top.id: 9}):
        assert version == 9 and entry is not None
        want = bulk_lines(index_action("pk", nodes[node_id], 9))
        assert canonical(parsed(entry)) == canonical(want)
        seen += 1
    assert seen == len(ids)
    # And reindex's walk of a namespace.
    walked = dict(walk_entries(conn, "u", "pk", 5))
    assert walked.keys() == set(ids)
    for node_id, entry in walked.items():
        want = bulk_lines(index_action("pk", nodes[node_id], 5))
        assert canonical(parsed(entry)) == canonical(want)


def test_reading_a_batch_builds_no_node_per_document(
    coord: Coordinator, es: SearchEngine, alias: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker's read of a batch's nodes and of a moved directory's subtree: the rows
    come back as PostgreSQL rendered them, no ``Node`` built per document (the subtree's
    top is the one read as a ``Node``)."""
    coord.create_namespace("n")
    coord.mkdir("n", "/d")
    for i in range(20):
        coord.create_file("n", f"/d/f{i}", f"{i}", metadata={"i": i})
    built = count_nodes_built(monkeypatch, live_nodes)
    elasticsearch_index.ensure_alias(es, alias)
    events, _ = coord.read_events(after=0)
    plan = plan_batch(events)
    app = Applier(coord.engine, es, alias, lambda r: None)
    read = app.read_nodes(plan, events[-1].position)
    assert read.actions is not None and len(read.actions) == 21
    assert built == []
    stats = app.send_nodes(read)
    assert stats.indexed == 21
    before = events[-1].position
    coord.rename("n", "/d", "e")
    events, _ = coord.read_events(after=before)
    plan = plan_batch(events)
    version = events[-1].position
    app.apply_nodes(plan, version)
    built.clear()
    work = SubtreeWork.from_plan(plan, after=0, cursor=version, version=version)
    assert app.apply_subtrees(work).indexed == 20
    assert built == ["/e"]


def test_reindex_builds_no_node_per_document(
    coord: Coordinator, es: SearchEngine, alias: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reindex's documents come from the snapshot as PostgreSQL rendered them, and the
    rebuilt index holds the reference documents."""
    _tree(coord)
    built = count_nodes_built(monkeypatch, live_nodes)
    result = rebuild(coord, es, source="snapshot", alias=alias)
    assert built == []
    monkeypatch.undo()
    assert result.swapped and result.documents == 36
    with coord.engine.connect() as conn:
        want = {n.id: document_for(n, result.position) for n in walk_nodes(conn, "u")
                if n.parent_id is not None}
    es.refresh(alias)
    hits = es.search(alias, {"query": {"match_all": {}}, "size": 100}, routing="u")
    got = {h["_id"]: h["_source"] for h in hits["hits"]["hits"]}
    assert canonical(got) == canonical(want)


def test_rendered_actions_are_answered_as_any_other(
    coord: Coordinator, conn: Connection, es: SearchEngine, alias: str,
) -> None:
    """Written, already newer, refused (its document read back for the dead letter), and
    replaced by compare-and-swap when edited by hand: the answer handling of
    ``indexer.bulk`` for actions whose lines PostgreSQL rendered."""
    elasticsearch_index.ensure_alias(es, alias)
    _tree(coord)
    ids = sorted(conn.execute(text("SELECT CAST(id AS text) FROM nodes WHERE namespace = 'u' "
                                   "AND parent_id IS NOT NULL")).scalars())
    entries = fetch_entries(conn, alias, "u", ids, 10)
    actions = [rendered_action(alias, "u", i, 10, e) for i in ids if (e := entries[i])]
    rejected: list[Rejected] = []
    assert send(es, actions, rejected.append, chunk_size=7).indexed == len(ids)
    nodes = fetch_nodes(conn, "u", ids)
    first = es.get(index=alias, id=ids[0], routing="u", realtime=True)["_source"]
    assert canonical(first) == canonical(document_for(nodes[ids[0]], 10))

    # Edited by hand: its version runs ahead of its seq, which a rendered write replaces.
    es.update(alias, ids[1], {"name": "edited"}, routing="u")
    newer = fetch_entries(conn, alias, "u", ids[1:2], 11)[ids[1]]
    assert newer is not None
    line = json.loads(newer.split(b"\n")[1])
    bad_doc = {**line, "not_in_mapping": 1}  # dynamic: strict refuses it
    bad_meta = newer.split(b"\n")[0].replace(ids[1].encode(), ids[2].encode())
    bad = rendered_action(alias, "u", ids[2], 11,
                          bad_meta + b"\n" + json.dumps(bad_doc).encode() + b"\n")
    again = [*actions[3:], rendered_action(alias, "u", ids[1], 11, newer), bad]
    stats = send_request(es, again, rejected.append)
    assert (stats.already_newer, stats.overridden, stats.rejected) == (len(actions) - 3, 1, 1)
    assert [(r.node_id, r.status) for r in rejected] == [(ids[2], 400)]
    assert rejected[0].document == bad_doc  # big integers exact: read back by json
    replaced = es.get(index=alias, id=ids[1], routing="u", realtime=True)["_source"]
    assert canonical(replaced) == canonical(document_for(nodes[ids[1]], 11))
