"""Reading a whole index back, in ``node_id`` order, from one point in time (verify
compares it with PostgreSQL; a namespace replay finds the documents to delete)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from .contract import namespace_filter, namespaces_filter
from .search_engine import SearchEngine

#: Documents per search_after page: large pages, because every page costs a search
#: (the stand-in's grows with the index size) and 5,000 documents are a few MB at most.
SCAN_PAGE = 5000
PIT_KEEP_ALIVE = "2m"


def stream_index_docs(
    es: SearchEngine,
    index: str,
    namespace: str | None = None,
    *,
    exclude_namespaces: Sequence[str] = (),
    page: int = SCAN_PAGE,
) -> Iterator[dict[str, Any]]:
    """Every document's ``_source`` in ``index`` (an alias is fine) for ``namespace``
    (or every namespace but ``exclude_namespaces``), sorted by ``node_id``, from one
    point in time."""
    filters: list[dict[str, Any]] = []
    if namespace is not None:
        filters.append(namespace_filter(namespace))
    query: dict[str, Any] = {"bool": {"filter": filters}}
    if exclude_namespaces:
        query["bool"]["must_not"] = [namespaces_filter(exclude_namespaces)]
    pit_id = es.open_point_in_time(index, PIT_KEEP_ALIVE)
    after: list[Any] | None = None
    try:
        while True:
            body: dict[str, Any] = {
                "pit": {"id": pit_id, "keep_alive": PIT_KEEP_ALIVE}, "size": page,
                "query": query, "sort": [{"node_id": "asc"}], "track_total_hits": False,
            }
            if after is not None:
                body["search_after"] = after
            res = es.search(None, body)
            pit_id = res.get("pit_id", pit_id)
            hits = res["hits"]["hits"]
            for hit in hits:
                yield hit["_source"]
            if len(hits) < page:
                return
            after = hits[-1]["sort"]
    finally:
        es.close_point_in_time(pit_id)
