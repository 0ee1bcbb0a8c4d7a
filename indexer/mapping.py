"""The Elasticsearch index: settings, explicit mappings, and the alias in front of it.

Services search the alias (default ``pathkeeper-nodes``); the data lives in a
versioned concrete index behind it (``pathkeeper-nodes-v1``, ``-v2``...), so a
full rebuild can load a new concrete index and switch the alias with one atomic
``_aliases`` request.

The search contract (one document per live node, namespace roots excluded,
``_id`` = node id, routed by namespace):

* ``namespace``, ``node_id``, ``parent_id``, ``name``, ``kind``: keyword;
* ``path``: keyword (the full path);
* ``tree``: keyword, the path and each of its ancestors (``/a/b/c`` holds
  ``/a``, ``/a/b``, ``/a/b/c``), written by the indexer: ``term tree: "/a"`` finds
  ``/a`` and everything under it (``subtree_filter``). It needs nothing but core
  field types, so the same mapping works on a node without optional modules (no
  ``path_hierarchy`` tokenizer, which lives in ``analysis-common``) and costs one
  term lookup, not a prefix scan over every path;
* ``content``: text (files only); ``metadata``: stored, not indexed;
* ``seq``: the event-log position the document reflects (also its external
  version, see ``indexer.worker``).

``dynamic: strict`` makes a document with an unexpected field fail loudly (it
ends up in the dead-letter table) instead of silently growing the mapping.
"""

from __future__ import annotations

from typing import Any

from elasticsearch import Elasticsearch, NotFoundError

DEFAULT_ALIAS = "pathkeeper-nodes"

#: Deleted documents keep their version (the tombstone that stops a late, older
#: write from resurrecting them) this long. Elasticsearch's default is 60 s; the
#: worker aborts any batch older than ``MAX_BATCH_AGE`` seconds, which must stay
#: well below this (see indexer.worker).
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


def tree_values(path: str) -> list[str]:
    """The ``tree`` field of the document at ``path``: it and every ancestor but the
    root (``/`` would match a whole namespace, which the namespace filter already is)."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def subtree_filter(path: str) -> dict[str, Any] | None:
    """The filter clause for ``path`` and everything under it (None for ``/``: the
    whole namespace)."""
    if path == "/":
        return None
    return {"term": {TREE_FIELD: path}}


class MappingOutdated(Exception):
    """The live index lacks fields this version writes (it was created by an older
    version): writing to it would dead-letter every document."""


def check_mapping(es: Elasticsearch, index: str, alias: str = DEFAULT_ALIAS) -> None:
    """Raise ``MappingOutdated`` unless ``index`` has every field of ``MAPPINGS``.

    An older index moves over with ``pathkeeper reindex``: it loads a new concrete
    index with today's mapping from PostgreSQL and swaps the alias atomically, so
    search keeps answering from the old index until then."""
    found = es.indices.get_mapping(index=index)
    for body in found.body.values():
        props = body.get("mappings", {}).get("properties", {})
        missing = sorted(name for name in MAPPINGS["properties"] if name not in props)
        if missing:
            raise MappingOutdated(
                f"index {index} behind alias {alias} was created by an older version "
                f"(no field {', '.join(missing)}); run `pathkeeper reindex --alias {alias}` "
                "to rebuild it with this version's mapping, then start the worker again"
            )


def index_settings(shards: int = 1, replicas: int = 0) -> dict[str, Any]:
    """Settings of a concrete index (``replicas=0`` suits a single-node cluster)."""
    return {
        "number_of_shards": shards,
        "number_of_replicas": replicas,
        "gc_deletes": GC_DELETES,
    }


def concrete_name(alias: str = DEFAULT_ALIAS, version: int = 1) -> str:
    """The concrete index name for ``alias`` at ``version``, e.g. ``pathkeeper-nodes-v1``."""
    return f"{alias}-v{version}"


def create_index(
    es: Elasticsearch, name: str, *, shards: int = 1, replicas: int = 0
) -> bool:
    """Create concrete index ``name`` with our settings and mappings.

    Returns False (and changes nothing) when it already exists.
    """
    if es.indices.exists(index=name):
        return False
    try:
        es.indices.create(
            index=name, settings=index_settings(shards, replicas), mappings=MAPPINGS
        )
    except Exception as exc:  # a concurrent creator won the race
        if getattr(exc, "error", "") == "resource_already_exists_exception":
            return False
        raise
    return True


def alias_targets(es: Elasticsearch, alias: str = DEFAULT_ALIAS) -> list[str]:
    """The concrete indices ``alias`` points to (empty if the alias does not exist)."""
    try:
        found = es.indices.get_alias(name=alias)
    except NotFoundError:
        return []
    return sorted(found.body.keys())


class IndexMissing(Exception):
    """The alias is gone (deleted by hand, or with its index) although documents were
    indexed behind it. Recreating it empty would make search answer nothing while
    every check says the index is up to date, so nothing recreates it but a rebuild."""


def our_indices(es: Elasticsearch, alias: str = DEFAULT_ALIAS) -> list[str]:
    """Concrete indices named like ours (``<alias>-vN``), whether the alias points to
    them or not."""
    found = es.indices.get(index=f"{alias}-v*", expand_wildcards="all")
    return sorted(found.body.keys())


def missing_alias_message(alias: str, indexed: bool, leftovers: list[str]) -> str:
    why = (f"its indices {', '.join(leftovers)} are there without it" if leftovers
           else "documents were indexed behind it")
    return (
        f"alias {alias} is missing but {why}: someone deleted the alias or its index. "
        f"Nothing is written until it is rebuilt: run `pathkeeper reindex --alias {alias}` "
        "(it loads a new index from PostgreSQL and creates the alias)"
    )


def ensure_alias(es: Elasticsearch, alias: str = DEFAULT_ALIAS, *, indexed: bool = False) -> str:
    """Make sure ``alias`` exists, creating ``<alias>-v1`` behind it only when none of
    ours exists yet and nothing was indexed (``indexed``: the caller's checkpoints
    moved past the start of the log); otherwise raise ``IndexMissing``.

    Returns the concrete index the alias writes to. Safe to call from several
    processes at once: the index is created together with its alias, in one request,
    so nobody sees one without the other.
    """
    targets = alias_targets(es, alias)
    if targets:
        return targets[-1]
    leftovers = our_indices(es, alias)
    # Another process may have created index and alias between our two reads: they
    # appear together, so reading the alias again after the indices tells.
    targets = alias_targets(es, alias)
    if targets:
        return targets[-1]
    if leftovers or indexed:
        raise IndexMissing(missing_alias_message(alias, indexed, leftovers))
    name = concrete_name(alias, 1)
    try:
        es.indices.create(
            index=name, settings=index_settings(), mappings=MAPPINGS,
            aliases={alias: {"is_write_index": True}},
        )
    except Exception as exc:  # a concurrent creator won the race: its alias is there
        if getattr(exc, "error", "") != "resource_already_exists_exception":
            raise
    targets = alias_targets(es, alias)
    if not targets:
        raise IndexMissing(missing_alias_message(alias, indexed, our_indices(es, alias)))
    return targets[-1]


def switch_alias(es: Elasticsearch, alias: str, new_index: str) -> list[str]:
    """Point ``alias`` at ``new_index`` only, in one atomic ``_aliases`` request.

    Returns the indices it pointed to before (the caller decides whether to
    delete them).
    """
    old = [i for i in alias_targets(es, alias) if i != new_index]
    actions: list[dict[str, Any]] = [{"remove": {"index": i, "alias": alias}} for i in old]
    actions.append({"add": {"index": new_index, "alias": alias, "is_write_index": True}})
    es.indices.update_aliases(actions=actions)
    return old


def drop_alias_and_indices(es: Elasticsearch, alias: str) -> None:
    """Delete every concrete index behind ``alias`` (tests and tear-down)."""
    for index in alias_targets(es, alias):
        es.indices.delete(index=index)
