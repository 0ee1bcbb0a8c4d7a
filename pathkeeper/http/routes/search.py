"""Search over the index, and read-your-writes waits for the indexer."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query

from coordinator import paths
from coordinator.api import Coordinator
from coordinator.errors import NotADirectory, Unavailable
from pathkeeper.http.deps import (
    ANY_READ,
    MAX_PAGE,
    MAX_WAIT,
    READ,
    ConsumerDep,
    CoordDep,
    Cursor,
    NsParam,
    SearcherDep,
    SettingsDep,
    checked_path,
)
from pathkeeper.http.errors import ServiceError
from pathkeeper.http.operations import NAMESPACE_URL
from pathkeeper.http.schemas import IndexedOut, SearchOut
from pathkeeper.http.search import SearchQuery
from pathkeeper.http.settings import ServiceSettings
from pathkeeper.http.threads import blocking

router = APIRouter(tags=["search"])

PathFilter = Annotated[str | None, Query(max_length=paths.MAX_PATH_BYTES,
                                         description="only this subtree")]
DirFilter = Annotated[str | None, Query(alias="dir", max_length=paths.MAX_PATH_BYTES,
                                        description="only children of this directory")]
MinSeq = Annotated[int | None, Query(ge=0, le=2**62, description="wait until indexed")]


@router.get(f"{NAMESPACE_URL}/search", response_model=SearchOut, dependencies=[Depends(READ)])
@blocking
def search(
    ns: NsParam,
    coord: CoordDep,
    settings: SettingsDep,
    searcher: SearcherDep,
    consumer: ConsumerDep,
    q: Annotated[str | None, Query(max_length=1000, description="full text")] = None,
    under: PathFilter = None,
    in_dir: DirFilter = None,
    kind: Literal["file", "dir"] | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
    cursor: Cursor = None,
    min_seq: MinSeq = None,
) -> SearchOut:
    """Search the namespace's index. ``min_seq`` (a mutation's ``seq``) waits, bounded,
    until the indexer has applied it, so a caller sees its own changes."""
    limit = min(limit, settings.max_page)
    if searcher is None:
        raise Unavailable("search is not configured (no Elasticsearch URL)")
    coord.stat(ns, "/")  # 404 for a missing namespace
    if under is not None:
        under = paths.join_path(paths.split_path(checked_path(under, settings),
                                                 settings.coordinator.max_depth))
    parent_id = None
    if in_dir is not None:
        dir_path = checked_path(in_dir, settings)
        node = coord.stat(ns, dir_path)
        if not node.is_dir:
            raise NotADirectory(f"{node.path} is a file")
        parent_id = node.id
    if min_seq is not None:
        _wait_indexed(coord, settings, consumer, min_seq)
        searcher.refresh()
    return searcher.search(SearchQuery(ns, q or None, under, parent_id, kind, limit, cursor))


def _wait_indexed(coord: Coordinator, settings: ServiceSettings, consumer: str, seq: int
                  ) -> None:
    if not coord.wait_indexed(seq, timeout=settings.max_index_wait_seconds,
                              consumer=consumer):
        raise ServiceError(503, "index_lagging",
                           f"the indexer has not reached seq {seq} yet; retry later")


@router.get("/v1/indexed", response_model=IndexedOut, dependencies=[Depends(ANY_READ)])
@blocking
def indexed(
    coord: CoordDep,
    settings: SettingsDep,
    consumer: ConsumerDep,
    seq: Annotated[int, Query(ge=0, le=2**62, description="a mutation's seq")],
    timeout: Annotated[float, Query(ge=0, le=MAX_WAIT)] = 10.0,
) -> IndexedOut:
    """Wait (bounded) until the indexer has applied every event up to ``seq``:
    ``Coordinator.wait_indexed`` over HTTP. Answers whether it has."""
    wait = min(timeout, settings.max_index_wait_seconds)
    return IndexedOut(indexed=coord.wait_indexed(seq, timeout=wait, consumer=consumer))
