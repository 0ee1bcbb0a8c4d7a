"""Reading nodes, and registering one handler for both URL forms of a node.

A node is addressed by path (``/v1/namespaces/{ns}/node?path=/a/b``, the path in a
query parameter so no URL normalisation can rewrite it) or by id
(``/v1/namespaces/{ns}/nodes/{id}``); both forms offer the same reads and changes,
served by the same handler (``add_node_route``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from pathkeeper.http.calls import STAT, serving
from pathkeeper.http.cursors import InvalidCursor, decode_name_cursor, encode_name_cursor
from pathkeeper.http.deps import (
    READ,
    CoordDep,
    Cursor,
    NsParam,
    PageLimit,
    Ref,
    SettingsDep,
    by_id,
    by_path,
)
from pathkeeper.http.operations import NAMESPACE_URL, NODE_BY_ID, NODE_BY_PATH
from pathkeeper.http.schemas import ListOut, NodeOut
from pathkeeper.http.search import invalid_cursor
from pathkeeper.http.threads import blocking

router = APIRouter()


def add_node_route(
    router: APIRouter,
    suffix: str,
    endpoint: Callable[..., Any],
    *,
    method: str,
    name: str,
    docs: tuple[str, str],
    dependencies: Sequence[Any] = (),
    **options: Any,
) -> None:
    """Register ``endpoint`` at ``.../node<suffix>?path=`` and ``.../nodes/{node_id}<suffix>``
    (named ``<name>`` and ``<name>_by_id``, described by ``docs``); the handler takes
    the node as ``deps.Ref``."""
    forms = ((NODE_BY_PATH, by_path, "path", docs[0]), (NODE_BY_ID, by_id, "id", docs[1]))
    for form, declare, by, doc in forms:
        router.add_api_route(
            f"{NAMESPACE_URL}{form}{suffix}", endpoint, methods=[method],
            name=name if by == "path" else f"{name}_by_id",
            description=doc, tags=[f"nodes by {by}"],
            dependencies=[Depends(declare), *dependencies], **options,
        )


@serving(STAT)
@blocking
def stat(ns: NsParam, ref: Ref, coord: CoordDep, settings: SettingsDep) -> Response:
    return STAT.response(coord, ns, ref, ref.checked(settings))


@blocking
def list_children(
    ns: NsParam, ref: Ref, coord: CoordDep, settings: SettingsDep, cursor: Cursor = None,
    limit: PageLimit = 100,
) -> ListOut:
    target = ref.checked(settings)
    limit = min(limit, settings.max_page)
    try:
        after = decode_name_cursor(cursor) if cursor else None
    except InvalidCursor as exc:
        raise invalid_cursor() from exc
    nodes = coord.run(ns, lambda uow: uow.tree.listdir(target, after, limit))
    next_cursor = encode_name_cursor(nodes[-1].name) if len(nodes) == limit else None
    return ListOut(nodes=[NodeOut.of(n) for n in nodes], cursor=next_cursor)


add_node_route(
    router, "", stat, method="GET", name="stat_node", response_model=NodeOut,
    dependencies=[Depends(READ)],
    docs=("The node at ``path`` (ETag: its version).",
          "The node with this id (ETag: its version)."),
)
add_node_route(
    router, "/children", list_children, method="GET", name="list_children", response_model=ListOut,
    dependencies=[Depends(READ)],
    docs=("Children of the directory at ``path``, by name; pass ``cursor`` for the next page.",
          "Children of the directory with this id, by name."),
)
