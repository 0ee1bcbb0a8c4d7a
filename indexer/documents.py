"""From a node (as PostgreSQL has it now) to its Elasticsearch document and bulk actions.

Pure functions, no I/O. Every write carries the event-log position it reflects
as its external version, and is routed by namespace, so a namespace's documents
live in one shard and can never appear in another namespace's (filtered) search.
"""

from __future__ import annotations

from typing import Any

from coordinator import Node

from .mapping import subtree_filter, tree_values


def is_indexed(node: Node) -> bool:
    """Namespace roots are not indexed; every other node is."""
    return node.parent_id is not None


def document_for(node: Node, seq: int) -> dict[str, Any]:
    """The document for ``node`` as of event position ``seq`` (the search contract,
    see ``indexer.mapping``). ``content`` is present for files only."""
    if not is_indexed(node):
        raise ValueError("namespace roots are not indexed")
    doc: dict[str, Any] = {
        "namespace": node.namespace,
        "node_id": node.id,
        "parent_id": node.parent_id,
        "name": node.name,
        "kind": node.kind,
        "path": node.path,
        "tree": tree_values(node.path),
        "metadata": dict(node.metadata),
        "seq": seq,
    }
    if node.kind == "file":
        doc["content"] = node.content if node.content is not None else ""
    return doc


def index_action(index: str, node: Node, seq: int) -> dict[str, Any]:
    """A bulk ``index`` action writing ``node`` at external version ``seq``."""
    return {
        "_op_type": "index",
        "_index": index,
        "_id": node.id,
        "routing": node.namespace,
        "version": seq,
        "version_type": "external",
        "_source": document_for(node, seq),
    }


def delete_action(index: str, namespace: str, node_id: str, seq: int) -> dict[str, Any]:
    """A bulk ``delete`` action removing ``node_id`` at external version ``seq``: it
    also leaves a tombstone that rejects older writes (for ``index.gc_deletes``)."""
    return {
        "_op_type": "delete",
        "_index": index,
        "_id": node_id,
        "routing": namespace,
        "version": seq,
        "version_type": "external",
    }


def namespace_filter(namespace: str) -> dict[str, Any]:
    """The filter clause every search must carry (routing alone is not isolation:
    several namespaces share a shard)."""
    return {"term": {"namespace": namespace}}


def under_path_query(namespace: str, path: str) -> dict[str, Any]:
    """A query for ``path`` and everything under it, in ``namespace``."""
    filters: list[dict[str, Any]] = [namespace_filter(namespace)]
    under = subtree_filter(path)
    if under is not None:
        filters.append(under)
    return {"bool": {"filter": filters}}
