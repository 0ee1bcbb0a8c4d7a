"""The index on the search server: create it, put the alias in front, check it,
and the index steps of a rebuild (a new index marked as building, the atomic swap).

What the index holds (settings, mappings, documents, queries, alias naming) is the
engine-neutral ``indexer.contract``; the calls go through the seam
(``indexer.search_engine``), so the same steps run on Elasticsearch and OpenSearch.
"""

from __future__ import annotations

import re
from typing import Any

from .contract import (
    DEFAULT_ALIAS,
    DEFAULT_SHAPE,
    IndexShape,
    building_marker,
    concrete_name,
    concrete_pattern,
    concrete_version,
    index_mappings,
    index_settings,
    missing_fields,
)
from .errors import IndexerError
from .search_engine import SearchEngine, SearchNotFound, SearchRefused

#: The setting that bounds one request to the server, a document's bulk action included.
REQUEST_LIMIT_SETTING = "http.max_content_length"
#: JSON escaping at its worst: a control character of content is six bytes (``\u0001``).
JSON_ESCAPE_WORST = 6
_UNITS = {"b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30,
          "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "p": 1 << 50, "pb": 1 << 50}


def parse_byte_size(value: str) -> int:
    """Bytes of an Elasticsearch byte-size setting (``100mb``, ``1gb``, ``512b``);
    ``ValueError`` for anything else."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", value)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"not a byte size: {value!r}")
    return int(float(match.group(1)) * _UNITS[unit])


def request_limit(es: SearchEngine) -> int | None:
    """The server's ``http.max_content_length`` in bytes (a node setting, reported
    among the defaults when set in its configuration file); None if it says none."""
    found = es.cluster_settings(filter_path=f"*.{REQUEST_LIMIT_SETTING}")
    for scope in ("transient", "persistent", "defaults"):
        value: Any = found.get(scope)
        for key in REQUEST_LIMIT_SETTING.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            return parse_byte_size(str(value))
    return None


def content_limit_problem(limit: int | None, max_content_bytes: int) -> str | None:
    """Why a file of ``max_content_bytes`` might not fit in one request to a server
    whose ``request_limit`` is ``limit`` (JSON-escaped at its worst), or None if it
    fits (or the server names no limit). Such a document is dead-lettered when met,
    never retried forever (``indexer.bulk``); this says so before it happens."""
    if limit is None or max_content_bytes * JSON_ESCAPE_WORST <= limit:
        return None
    return (
        f"the content limit ({max_content_bytes} bytes) times {JSON_ESCAPE_WORST} (JSON "
        f"escaping at its worst) is more than the search server's {REQUEST_LIMIT_SETTING} "
        f"({limit} bytes): a file near the limit may be too large to index and go to the "
        "dead letters; lower --max-content-bytes or raise the server's setting"
    )


class MappingOutdated(IndexerError):
    """The live index lacks fields this version writes (it was created by an older
    version): writing to it would dead-letter every document."""


def check_mapping(es: SearchEngine, index: str, alias: str = DEFAULT_ALIAS) -> None:
    """Raise ``MappingOutdated`` unless ``index`` has every field of ``MAPPINGS``.

    An older index moves over with ``pathkeeper reindex``: it loads a new concrete
    index with today's mapping from PostgreSQL and swaps the alias atomically, so
    search keeps answering from the old index until then."""
    found = es.get_mapping(index)
    for body in found.values():
        missing = missing_fields(body.get("mappings", {}).get("properties", {}))
        if missing:
            raise MappingOutdated(
                f"index {index} behind alias {alias} was created by an older version "
                f"(no field {', '.join(missing)}); run `pathkeeper reindex --alias {alias}` "
                "to rebuild it with this version's mapping, then start the worker again"
            )


def create_index(es: SearchEngine, name: str, *, shape: IndexShape = DEFAULT_SHAPE) -> bool:
    """Create concrete index ``name`` of ``shape`` with our settings and mappings.

    Returns False (and changes nothing) when it already exists.
    """
    if es.index_exists(name):
        return False
    try:
        es.create_index(name, settings=index_settings(shape), mappings=index_mappings(shape))
    except SearchRefused as exc:  # a concurrent creator won the race
        if exc.error == "resource_already_exists_exception":
            return False
        raise
    return True


def alias_targets(es: SearchEngine, alias: str = DEFAULT_ALIAS) -> list[str]:
    """The concrete indices ``alias`` points to (empty if the alias does not exist)."""
    try:
        found = es.get_alias(alias)
    except SearchNotFound:
        return []
    return sorted(found.keys())


class IndexMissing(IndexerError):
    """The alias is gone (deleted by hand, or with its index) although documents were
    indexed behind it. Recreating it empty would make search answer nothing while
    every check says the index is up to date, so nothing recreates it but a rebuild."""


def our_indices(es: SearchEngine, alias: str = DEFAULT_ALIAS) -> list[str]:
    """Concrete indices named like ours (``<alias>-vN``), whether the alias points to
    them or not."""
    return sorted(es.get_indices(concrete_pattern(alias)).keys())


def missing_alias_message(alias: str, indexed: bool, leftovers: list[str]) -> str:
    why = (f"its indices {', '.join(leftovers)} are there without it" if leftovers
           else "documents were indexed behind it")
    return (
        f"alias {alias} is missing but {why}: someone deleted the alias or its index. "
        f"Nothing is written until it is rebuilt: run `pathkeeper reindex --alias {alias}` "
        "(it loads a new index from PostgreSQL and creates the alias)"
    )


def ensure_alias(es: SearchEngine, alias: str = DEFAULT_ALIAS, *, indexed: bool = False,
                 shape: IndexShape = DEFAULT_SHAPE) -> str:
    """Make sure ``alias`` exists, creating ``<alias>-v1`` (of ``shape``) behind it only
    when none of ours exists yet and nothing was indexed (``indexed``: the caller's
    checkpoints moved past the start of the log); otherwise raise ``IndexMissing``.
    An index that exists keeps its shape (``pathkeeper reindex`` builds a new one).

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
        es.create_index(
            name, settings=index_settings(shape), mappings=index_mappings(shape),
            aliases={alias: {"is_write_index": True}},
        )
    except SearchRefused as exc:  # a concurrent creator won the race: its alias is there
        if exc.error != "resource_already_exists_exception":
            raise
    targets = alias_targets(es, alias)
    if not targets:
        raise IndexMissing(missing_alias_message(alias, indexed, our_indices(es, alias)))
    return targets[-1]


def switch_alias(
    es: SearchEngine, alias: str, new_index: str, *, built: bool = False
) -> list[str]:
    """Point ``alias`` at ``new_index`` only, in one atomic ``_aliases`` request (which,
    when ``built``, also takes the building marker off ``new_index``).

    Returns the indices it pointed to before (the caller decides whether to
    delete them).
    """
    old = [i for i in alias_targets(es, alias) if i != new_index]
    actions: list[dict[str, Any]] = [{"remove": {"index": i, "alias": alias}} for i in old]
    actions.append({"add": {"index": new_index, "alias": alias, "is_write_index": True}})
    if built:
        actions.append({"remove": {"index": new_index, "alias": building_marker(alias)}})
    es.update_aliases(actions)
    return old


# ------------------------------------------------ rebuilds (replay, reindex)


def next_index_name(es: SearchEngine, alias: str) -> str:
    """``alias-vN`` with N one above every existing ``alias-v*`` index."""
    try:
        existing = es.get_indices(concrete_pattern(alias))
    except SearchNotFound:
        existing = {}
    versions = [v for name in existing if (v := concrete_version(alias, name)) is not None]
    return concrete_name(alias, max(versions, default=0) + 1)


def abandoned_indices(es: SearchEngine, alias: str) -> list[str]:
    """Indices marked as building for ``alias`` that the alias does not point to."""
    try:
        found = es.get_alias(building_marker(alias))
    except SearchNotFound:
        return []
    live = set(alias_targets(es, alias))
    return sorted(i for i in found if i not in live)


def create_building_index(
    es: SearchEngine, alias: str, name: str, shape: IndexShape = DEFAULT_SHAPE
) -> bool:
    """Create ``name``, a new concrete index for ``alias`` (the contract's settings and
    mappings, of ``shape`` but without replicas while it loads), tuned for loading and
    marked as building in the same request, so that no crash can leave an unmarked
    half-built index behind. False if it exists."""
    loading = IndexShape(shape.shards, 0, shape.namespace_shards)
    settings = {**index_settings(loading), "refresh_interval": "-1"}
    try:
        es.create_index(name, settings=settings, mappings=index_mappings(shape),
                        aliases={building_marker(alias): {}})
    except SearchRefused as exc:
        if exc.error == "resource_already_exists_exception":
            return False
        raise
    return True


def finish_loading(es: SearchEngine, index: str, replicas: int) -> None:
    """Restore the settings ``create_building_index`` changed, and make docs visible."""
    es.put_settings(
        index, {"index": {"refresh_interval": None, "number_of_replicas": replicas}}
    )
    es.refresh(index)


def unmark_building(es: SearchEngine, alias: str, index: str) -> None:
    """Take the building marker off ``index`` without switching ``alias`` to it."""
    es.update_aliases([{"remove": {"index": index, "alias": building_marker(alias)}}])


def live_shape(es: SearchEngine, alias: str) -> IndexShape:
    """The shape of the index behind ``alias``, to build its successor alike; the
    default shape when there is none."""
    targets = alias_targets(es, alias)
    if not targets:
        return DEFAULT_SHAPE
    got = es.get_settings(targets[-1])[targets[-1]]["settings"]["index"]
    return IndexShape(int(got.get("number_of_shards", 1)),
                      int(got.get("number_of_replicas", 0)),
                      int(got.get("routing_partition_size", 1)))


def drop_alias_and_indices(es: SearchEngine, alias: str) -> None:
    """Delete every concrete index behind ``alias`` (tests and tear-down)."""
    for index in alias_targets(es, alias):
        es.delete_index(index)
