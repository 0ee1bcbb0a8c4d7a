"""A row of ``nodes`` as the coordinator reads it, and the node reference a caller
gives: the value types the tree's calls and readers share."""

from __future__ import annotations

import uuid
from typing import Any

from . import paths
from .errors import NotADirectory, NotFound
from .results import Node

#: A row read by column name (``row.id``): psycopg's named tuple on the paths that go
#: through ``Driver``, SQLAlchemy's ``Row`` elsewhere.
DbRow = Any

NODE_COLUMNS = "id, parent_id, name, kind, version, content, metadata, created_at, updated_at"


def parse_id(ref: object) -> uuid.UUID:
    try:
        return uuid.UUID(str(ref))
    except ValueError as exc:
        raise NotFound(f"no node with id {ref}") from exc


def node_of(ns: str, row: DbRow, path: str, with_content: bool = True) -> Node:
    """The ``Node`` of a ``nodes`` row (``NODE_COLUMNS``) at ``path``. A row without the
    timestamps (the indexer's walks select none) gives a node without them."""
    return Node(
        id=str(row.id),
        namespace=ns,
        parent_id=str(row.parent_id) if row.parent_id is not None else None,
        name=row.name,
        kind=row.kind,
        version=int(row.version),
        path=path,
        content=row.content if with_content else None,
        metadata=dict(row.metadata or {}),
        # Asked of the row's keys, not with getattr's default: a missing attribute costs
        # the row an exception built and caught, twice per node of a subtree walk.
        created_at=row.created_at if "created_at" in row._fields else None,
        updated_at=row.updated_at if "updated_at" in row._fields else None,
    )


def check_walk(ns: str, parts: list[str], kinds: list[str]) -> None:
    """Raise, saying where it breaks off, unless the walk from the root (``kinds``: the
    kind of each node reached, root first) reaches the end of ``parts``."""
    if not kinds:
        raise NotFound(f"no namespace {ns!r}")
    if len(kinds) <= len(parts):
        where = paths.join_path(parts[: len(kinds) - 1])
        if kinds[-1] != "dir":
            raise NotADirectory(f"{where} is a file")
        raise NotFound(f"{paths.join_path(parts[: len(kinds)])} does not exist")
