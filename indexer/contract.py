"""The search contract: what the index holds, how it is asked, and which write wins.

Pure data and functions, no client and no I/O. The worker, replay, reindex, verify,
dead-letter retry and the HTTP search all build their documents, queries and index
definitions here, so the shape of a document is written down once. The worker's and
reindex's documents are rendered by PostgreSQL from the same field list
(``index_entry_sql``, ``document_sql``), ``document_for`` being the reference a property
test holds that rendering to (tests/indexer/test_rendered_documents.py). The calls that
talk to a server (create an index, move an alias, check a live mapping) are in
``indexer.elasticsearch_index``: a second engine (OpenSearch speaks the same
document, query and bulk-action format) is one more module of calls beside it,
while this one stays as it is.

**Documents.** One per live node, namespace roots excluded, ``_id`` = node id,
routed by namespace (a namespace's documents live in one shard):

* ``namespace``, ``node_id``, ``parent_id``, ``name``, ``kind``: keyword;
* ``path``: keyword (the full path);
* ``tree``: keyword, the path and each of its ancestors (``/a/b/c`` holds
  ``/a``, ``/a/b``, ``/a/b/c``): ``term tree: "/a"`` finds ``/a`` and everything
  under it (``subtree_filter``), never ``/ab``. It needs nothing but core field
  types, so the same mapping works on a node without optional modules (no
  ``path_hierarchy`` tokenizer, which lives in ``analysis-common``) and costs one
  term lookup, not a prefix scan over every path;
* ``content``: text (files only); ``metadata``: stored, not indexed;
* ``seq``: the event-log position the document reflects.

``dynamic: strict`` makes a document with an unexpected field fail loudly (it ends
up in the dead-letter table) instead of silently growing the mapping.

**Versions.** Every write carries its ``seq`` as its external version
(``version_type=external``): the engine keeps the highest, whichever lane, worker or
rebuild wrote last (``indexer.applier`` has the argument). A write the engine
refuses with a version conflict is judged by ``supersedes``. A delete leaves a
tombstone that refuses older writes for ``GC_DELETES``; every batch is abandoned
well before that (``MAX_BATCH_AGE``).

**Aliases.** Services search the alias (``DEFAULT_ALIAS``); the data lives in a
versioned concrete index behind it (``<alias>-v1``, ``-v2``...), so a full rebuild
loads a new concrete index and switches the alias with one atomic request; an index
being built carries the ``<alias>-building`` marker alias until it is switched in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from coordinator import Node

# The core owns the alias name (it names the indexer's checkpoint consumer after
# it); the contract re-exports it so search code finds it here.
from coordinator.indexing import DEFAULT_ALIAS as DEFAULT_ALIAS

# ------------------------------------------------------------------ aliases


def concrete_name(alias: str = DEFAULT_ALIAS, version: int = 1) -> str:
    """The concrete index name for ``alias`` at ``version``, e.g. ``pathkeeper-nodes-v1``."""
    return f"{alias}-v{version}"


def concrete_pattern(alias: str = DEFAULT_ALIAS) -> str:
    """The index pattern matching every concrete index of ``alias``."""
    return f"{alias}-v*"


def concrete_version(alias: str, name: str) -> int | None:
    """N for an index named ``<alias>-vN``, else None."""
    m = re.fullmatch(re.escape(alias) + r"-v(\d+)", name)
    return int(m.group(1)) if m else None


def building_marker(alias: str) -> str:
    """The alias that marks concrete indices still being built for ``alias``."""
    return f"{alias}-building"


# ------------------------------------------------------------ index definition

#: Deleted documents keep their version (the tombstone that stops a late, older
#: write from resurrecting them) this long. Elasticsearch's default is 60 s; the
#: worker aborts any batch older than ``MAX_BATCH_AGE`` seconds, which must stay
#: well below this (see indexer.applier).
GC_DELETES = "1h"
MAX_BATCH_AGE = 1800.0

TREE_FIELD = "tree"

MAPPINGS: dict[str, Any] = {
    "dynamic": "strict",
    "properties": {
        "namespace": {"type": "keyword"},
        "node_id": {"type": "keyword"},
        "parent_id": {"type": "keyword"},
        "name": {"type": "keyword"},
        "kind": {"type": "keyword"},
        "path": {"type": "keyword"},
        TREE_FIELD: {"type": "keyword"},
        "content": {"type": "text"},
        "metadata": {"type": "object", "enabled": False},
        "seq": {"type": "long"},
    },
}


@dataclass(frozen=True)
class IndexShape:
    """How a concrete index is laid out over the cluster, fixed when it is created
    (but ``replicas``, which the server changes live).

    * ``shards``: primary shards. 1 by default: an index of a few million small
      documents is far below the size at which a shard gets slow, and every search
      that is not routed asks every shard.
    * ``replicas``: copies of each shard on other nodes. 0 by default, which a single
      node needs (a replica is never put on its primary's node); on a cluster, 1 lets
      a node die without losing a write the server acknowledged nor stopping indexing
      beyond the failover.
    * ``namespace_shards``: how many shards one namespace's documents spread over
      (the server's ``routing_partition_size``). Documents are always routed by
      namespace, so every read and write addresses a document by (namespace, id)
      whatever the shape. 1 by default: a namespace lives in one shard and a search,
      which always names its namespace, asks that one shard; a namespace much bigger
      than the rest then makes its shard bigger than the rest (and hotter). More
      spreads each namespace over that many shards (its searches ask them all); it
      must stay below ``shards``.
    """

    shards: int = 1
    replicas: int = 0
    namespace_shards: int = 1

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem is not None:
            raise ValueError(problem)

    def problem(self) -> str | None:
        """What is wrong with this shape, or None."""
        if self.shards < 1:
            return f"an index needs at least 1 shard, not {self.shards}"
        if self.replicas < 0:
            return f"replicas cannot be negative ({self.replicas})"
        if self.namespace_shards < 1:
            return f"a namespace needs at least 1 shard, not {self.namespace_shards}"
        if self.namespace_shards > 1 and self.namespace_shards >= self.shards:
            return (f"namespace shards ({self.namespace_shards}) must be fewer than the "
                    f"index's shards ({self.shards}): the server spreads a namespace over "
                    "a part of the shards, never all of them")
        return None


#: The shape of an index when none is asked for (see ``IndexShape`` for why).
DEFAULT_SHAPE = IndexShape()


def index_settings(shape: IndexShape = DEFAULT_SHAPE) -> dict[str, Any]:
    """Settings of a concrete index of ``shape``."""
    settings: dict[str, Any] = {
        "number_of_shards": shape.shards,
        "number_of_replicas": shape.replicas,
        "gc_deletes": GC_DELETES,
    }
    if shape.namespace_shards > 1:
        settings["routing_partition_size"] = shape.namespace_shards
        # Without it the server hashes over its default routing shards (a multiple of
        # the shards, kept for a later _split) and the partition's offsets of 1..N-1
        # almost never reach another shard: a namespace stays in one shard, silently.
        settings["number_of_routing_shards"] = shape.shards
    return settings


def index_mappings(shape: IndexShape = DEFAULT_SHAPE) -> dict[str, Any]:
    """``MAPPINGS`` for an index of ``shape``: a namespace spread over several shards
    needs every write and read to name its routing, which the server then enforces."""
    if shape.namespace_shards > 1:
        return {"_routing": {"required": True}, **MAPPINGS}
    return MAPPINGS


def missing_fields(properties: Mapping[str, Any]) -> list[str]:
    """The fields of ``MAPPINGS`` a live index's mapping ``properties`` lacks (it was
    created by an older version: writing to it would dead-letter every document)."""
    return sorted(name for name in MAPPINGS["properties"] if name not in properties)


# ------------------------------------------------------------------ documents


def is_indexed(node: Node) -> bool:
    """Namespace roots are not indexed; every other node is."""
    return node.parent_id is not None


def tree_values(path: str) -> list[str]:
    """The ``tree`` field of the document at ``path``: it and every ancestor but the
    root (``/`` would match a whole namespace, which the namespace filter already is)."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def document_for(node: Node, seq: int) -> dict[str, Any]:
    """The document for ``node`` as of event position ``seq``. ``content`` is present
    for files only."""
    if not is_indexed(node):
        raise ValueError("namespace roots are not indexed")
    doc: dict[str, Any] = {
        "namespace": node.namespace,
        "node_id": node.id,
        "parent_id": node.parent_id,
        "name": node.name,
        "kind": node.kind,
        "path": node.path,
        TREE_FIELD: tree_values(node.path),
        "metadata": dict(node.metadata),
        "seq": seq,
    }
    if node.kind == "file":
        doc["content"] = node.content if node.content is not None else ""
    return doc


# The same document rendered by PostgreSQL: the production path of the worker's writes
# (the row never becomes a ``Node`` nor the document a dict in Python). ``document_for``
# stays the reference: tests/indexer/test_rendered_documents.py renders many nodes both
# ways and compares them. The fields are listed once here, for both branches (files add
# ``content``). ``json_build_object`` keeps the metadata as PostgreSQL's jsonb text, so an
# integer of any size stays exact (orjson would refuse one beyond 64 bits).


def tree_sql(path: str) -> str:
    """SQL: ``tree_values`` of the text expression ``path``, as a text[] (``/a/b``:
    ``{/a,/a/b}``; its parts split once, joined again up to each depth)."""
    return (f"ARRAY(SELECT array_to_string(t.parts[1:i], '/') "
            f"FROM (SELECT string_to_array({path}, '/') AS parts) t, "
            f"generate_series(2, cardinality(t.parts)) i ORDER BY i)")


def document_sql(row: str, path: str, seq: str, namespace: str, tree: str | None = None
                 ) -> str:
    """SQL: the JSON (type ``json``) of ``document_for`` for the ``nodes`` row aliased
    ``row`` at the text expression ``path`` as of the bigint expression ``seq``, in the
    text expression ``namespace``; ``tree``: a text[] expression equal to
    ``tree_sql(path)`` that a caller has at hand cheaper."""
    fields = [
        ("namespace", namespace), ("node_id", f"{row}.id"),
        ("parent_id", f"{row}.parent_id"), ("name", f"{row}.name"),
        ("kind", f"{row}.kind"), ("path", path),
        (TREE_FIELD, tree_sql(path) if tree is None else tree),
        ("metadata", f"{row}.metadata"), ("seq", seq),
    ]
    pairs = ", ".join(f"'{name}', {value}" for name, value in fields)
    return (f"CASE WHEN {row}.kind = 'file' THEN json_build_object({pairs}, "
            f"'content', COALESCE({row}.content, '')) ELSE json_build_object({pairs}) END")


def index_entry_sql(index: str, row: str, path: str, seq: str, namespace: str,
                    tree: str | None = None) -> str:
    """SQL: the text of ``index_action``'s two lines in a ``_bulk`` body (each ending in
    a newline) for the ``nodes`` row ``row``, written to the text expression ``index``;
    NULL for a namespace root (not indexed). ``tree``: as for ``document_sql``."""
    meta = (f"json_build_object('index', json_build_object('_index', {index}, "
            f"'_id', {row}.id, 'routing', {namespace}, 'version', {seq}, "
            "'version_type', 'external'))")
    document = document_sql(row, path, seq, namespace, tree)
    return (f"CASE WHEN {row}.parent_id IS NULL THEN NULL "
            f"ELSE CAST({meta} AS text) || E'\\n' || CAST({document} AS text) || E'\\n' END")


#: Fields that record when a document was written, not what it says: documents that
#: differ only there describe the same node (what verify compares is the rest).
WRITE_FIELDS = ("seq",)


def comparable(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` without ``WRITE_FIELDS``."""
    return {k: v for k, v in doc.items() if k not in WRITE_FIELDS}


def expected_document(node: Node) -> dict[str, Any]:
    """The document for ``node``, to compare with a stored one (``comparable``)."""
    return comparable(document_for(node, 0))


def differing_fields(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> tuple[str, ...]:
    """The fields in which two documents describe their node differently."""
    a, b = comparable(expected), comparable(actual)
    return tuple(sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k)))


# ------------------------------------------------------- writes and versions
#
# Bulk actions in the format of the official clients' ``bulk`` helpers (the
# Elasticsearch and OpenSearch clients share it). Only ``index`` and ``delete``:
# ``update`` refuses external versions.


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


#: The key under which an index action carries its ``_bulk`` lines as PostgreSQL
#: rendered them (``rendered_action``): sent as they are, with no ``_source`` dict.
RENDERED = "_rendered"


def rendered_action(index: str, namespace: str, node_id: str, seq: int,
                    entry: bytes) -> dict[str, Any]:
    """A bulk ``index`` action whose lines ``entry`` PostgreSQL rendered
    (``index_entry_sql``) for node ``node_id`` at external version ``seq``."""
    return {
        "_op_type": "index",
        "_index": index,
        "_id": node_id,
        "routing": namespace,
        "version": seq,
        "version_type": "external",
        RENDERED: entry,
    }


def source_of(action: Mapping[str, Any]) -> dict[str, Any] | None:
    """The document an index action writes (None for a delete): its ``_source``, or
    its rendered document line read back (a rejection, a compare-and-swap: rare)."""
    if action.get("_op_type", "index") == "delete":
        return None
    rendered = action.get(RENDERED)
    if rendered is not None:
        # The standard module, not orjson: it reads integers beyond 64 bits exactly.
        return dict(json.loads(bytes(rendered).split(b"\n")[1]))
    source = action.get("_source")
    return dict(source) if source is not None else None


def delete_action(index: str, namespace: str, node_id: str, seq: int) -> dict[str, Any]:
    """A bulk ``delete`` action removing ``node_id`` at external version ``seq``: it
    also leaves a tombstone that rejects older writes (for ``GC_DELETES``)."""
    return {
        "_op_type": "delete",
        "_index": index,
        "_id": node_id,
        "routing": namespace,
        "version": seq,
        "version_type": "external",
    }


#: Keys of an action that go in the metadata line of its ``_bulk`` entry.
_BULK_META = ("_index", "_id", "routing", "version", "version_type", "if_seq_no",
              "if_primary_term", "require_alias")


def bulk_lines(action: dict[str, Any]) -> list[dict[str, Any]]:
    """The lines of ``action`` in a ``_bulk`` body, as the clients' helpers send them:
    ``{op: metadata}``, then the document unless it is a delete."""
    op = str(action.get("_op_type", "index"))
    meta = {k: action[k] for k in _BULK_META if k in action}
    if op == "delete":
        return [{op: meta}]
    source = source_of(action) if RENDERED in action else action.get("_source")
    if source is None:
        source = {k: v for k, v in action.items() if k != "_op_type" and k not in _BULK_META}
    return [{op: meta}, source]


def supersedes(
    stored_seq: object, stored_version: object, version: int, newest_legit: int | None = None
) -> bool:
    """Whether a stored document (the ``seq`` it reflects, its version) is at least as
    new as a write at ``version``, i.e. a version conflict on that write means
    "already applied".

    The indexer writes every document at version = its ``seq``, so normally a conflict
    means a write at least as new is there. A document changed outside the indexer
    breaks that (the update API raises its version by one, a hand-made external
    version can be anything): its ``seq`` says what it reflects. So: a later ``seq``,
    or the same ``seq`` as the indexer wrote it (version = seq), supersedes; a ``seq``
    past ``newest_legit`` (a log position read after the conflict: no event reached
    it) or not a number does not."""
    if not isinstance(stored_seq, int) or (newest_legit is not None and stored_seq > newest_legit):
        return False
    return stored_seq > version or (stored_seq == version and stored_version == stored_seq)


# -------------------------------------------------------------------- queries


def namespace_filter(namespace: str) -> dict[str, Any]:
    """The filter clause every search must carry (routing alone is not isolation:
    several namespaces share a shard)."""
    return {"term": {"namespace": namespace}}


def namespaces_filter(namespaces: Iterable[str]) -> dict[str, Any]:
    """A filter clause for documents of any of ``namespaces``."""
    return {"terms": {"namespace": list(namespaces)}}


def subtree_filter(path: str) -> dict[str, Any] | None:
    """The filter clause for ``path`` and everything under it (None for ``/``: the
    whole namespace)."""
    if path == "/":
        return None
    return {"term": {TREE_FIELD: path}}


def search_filters(
    namespace: str,
    under: str | None = None,
    *,
    kind: str | None = None,
    parent_id: str | None = None,
) -> list[dict[str, Any]]:
    """The filter clauses for documents of ``namespace``, under ``under`` (that path
    and everything below it), of ``kind``, children of ``parent_id``."""
    filters = [namespace_filter(namespace)]
    if kind is not None:
        filters.append({"term": {"kind": kind}})
    subtree = subtree_filter(under) if under is not None else None
    if subtree is not None:
        filters.append(subtree)
    if parent_id is not None:
        filters.append({"term": {"parent_id": parent_id}})
    return filters


def under_path_query(namespace: str, path: str) -> dict[str, Any]:
    """A query for ``path`` and everything under it, in ``namespace``."""
    return {"bool": {"filter": search_filters(namespace, path)}}


def text_query(q: str) -> dict[str, Any]:
    """Documents whose content holds every word of ``q``, or whose name is ``q``
    (ranked higher). ``q`` is a value, never query syntax."""
    return {
        "bool": {
            "should": [
                {"match": {"content": {"query": q, "operator": "and"}}},
                {"term": {"name": {"value": q, "boost": 2.0}}},
            ],
            "minimum_should_match": 1,
        }
    }


def stale_under_query(namespace: str, paths: Iterable[str], before: int) -> dict[str, Any]:
    """Documents of ``namespace`` under any of ``paths`` written from a state older
    than position ``before`` (``/`` among them: the whole namespace)."""
    wanted = sorted(paths)
    filters: list[dict[str, Any]] = [
        namespace_filter(namespace),
        {"range": {"seq": {"lt": before}}},
    ]
    if "/" not in wanted:
        filters.append({"terms": {TREE_FIELD: wanted}})
    return {"bool": {"filter": filters}}
