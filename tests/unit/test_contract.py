"""The index contract (``indexer.contract``): documents, bulk actions, the version
rule and the filters, built without a search server."""

from __future__ import annotations

import dataclasses

import pytest

from coordinator import Node
from indexer.contract import (
    TREE_FIELD,
    building_marker,
    bulk_lines,
    concrete_name,
    concrete_version,
    delete_action,
    differing_fields,
    document_for,
    expected_document,
    index_action,
    subtree_filter,
    supersedes,
    tree_values,
)

ROOT = "00000000-0000-4000-8000-000000000000"
FILE = Node(id="00000000-0000-4000-8000-000000000001", namespace="t", parent_id=ROOT,
            name="f", kind="file", version=3, path="/a/b/f", content=None,
            metadata={"k": "v"})
ROOT_NODE = Node(id=ROOT, namespace="t", parent_id=None, name="", kind="dir", version=1,
                 path="/")


def test_index_names() -> None:
    assert concrete_name("pk", 7) == "pk-v7"
    assert concrete_version("pk", "pk-v7") == 7
    assert concrete_version("pk", "pk-building") is None
    assert building_marker("pk") == "pk-building"


def test_a_document_carries_its_ancestors_and_its_position() -> None:
    doc = document_for(FILE, 42)
    assert doc[TREE_FIELD] == tree_values("/a/b/f") == ["/a", "/a/b", "/a/b/f"]
    assert doc["seq"] == 42 and doc["content"] == "" and doc["metadata"] == {"k": "v"}
    assert "seq" not in expected_document(FILE)
    assert differing_fields(document_for(FILE, 1), document_for(FILE, 2)) == ()
    moved = document_for(dataclasses.replace(FILE, path="/c/f"), 1)
    assert differing_fields(doc, moved) == ("path", TREE_FIELD)


def test_roots_are_not_indexed() -> None:
    with pytest.raises(ValueError, match="roots"):
        document_for(ROOT_NODE, 1)


def test_actions_write_at_an_external_version_routed_by_namespace() -> None:
    write = index_action("pk", FILE, 9)
    assert (write["version"], write["version_type"], write["routing"]) == (9, "external", "t")
    meta, source = bulk_lines(write)
    assert meta == {"index": {"_index": "pk", "_id": FILE.id, "routing": "t", "version": 9,
                              "version_type": "external"}}
    assert source["path"] == "/a/b/f"
    assert bulk_lines(delete_action("pk", "t", FILE.id, 10)) == [
        {"delete": {"_index": "pk", "_id": FILE.id, "routing": "t", "version": 10,
                    "version_type": "external"}}
    ]


def test_the_version_rule() -> None:
    assert supersedes(10, 10, 9)  # written by the indexer from a later position
    assert supersedes(9, 9, 9)  # this very write, already there
    assert not supersedes(9, 10, 9)  # edited by hand since: its version moved on
    assert not supersedes(20, 20, 9, newest_legit=15)  # past anything the log reached
    assert not supersedes("x", 9, 9)


def test_the_root_filter_is_the_whole_namespace() -> None:
    assert subtree_filter("/") is None
    assert subtree_filter("/a") == {"term": {TREE_FIELD: "/a"}}
