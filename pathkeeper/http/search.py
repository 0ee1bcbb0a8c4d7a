"""Search over the index the indexer maintains (the contract is in ``indexer.contract``).

User input never becomes query syntax: ``q`` goes into ``match`` / ``term``
queries as a value, so Elasticsearch query-string operators in it are just text.
Every query is filtered by a ``term`` on ``namespace`` and routed by namespace; the
filters and the text query are the contract's (``search_filters``, ``text_query``).
Pagination uses ``search_after`` on (path, node_id) with an opaque cursor.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from coordinator.errors import Unavailable
from indexer.contract import search_filters, text_query
from indexer.elasticsearch_index import alias_targets, missing_alias_message, our_indices
from indexer.search_engine import (
    SearchEngine,
    SearchError,
    SearchRefused,
    SearchUnavailable,
    UnsupportedEngine,
)
from pathkeeper.http.errors import ServiceError
from pathkeeper.http.schemas import SearchHit, SearchOut

SOURCE_FIELDS = ["node_id", "path", "name", "kind", "parent_id", "seq"]


@dataclass(frozen=True)
class SearchQuery:
    namespace: str
    q: str | None = None
    #: Subtree filter: this path and everything under it.
    under: str | None = None
    #: Exactly the children of this directory (resolved to its node id by the caller).
    parent_id: str | None = None
    kind: str | None = None
    limit: int = 20
    cursor: str | None = None


def invalid_cursor(message: str = "cursor is not valid for this query") -> ServiceError:
    return ServiceError(400, "invalid_cursor", message)


def encode_cursor(mode: str, sort_values: list[Any]) -> str:
    raw = json.dumps({"m": mode, "s": sort_values}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(mode: str, cursor: str) -> list[Any]:
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_",
                               validate=True)
        data = json.loads(raw)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise invalid_cursor() from exc
    values = data.get("s") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict) or data.get("m") != mode or not isinstance(values, list)
        or len(values) != 2
        or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in values)
    ):
        raise invalid_cursor()
    return values


def build_body(query: SearchQuery) -> tuple[str, dict[str, Any]]:
    """The search request body (and the sort mode) for ``query``."""
    filters = search_filters(query.namespace, query.under, kind=query.kind,
                             parent_id=query.parent_id)
    must: list[dict[str, Any]] = [text_query(query.q)] if query.q else []
    # Results come in path order, like ``grep -r``, not by relevance: a path sort is
    # deterministic and stable while the index changes between pages, so search_after
    # never skips or repeats a hit. (Also: noida-db cannot resume search_after from a
    # ``_score`` sort value it returned itself; real Elasticsearch can.)
    mode = "path"
    sort: list[dict[str, Any]] = [{"path": {"order": "asc"}}, {"node_id": {"order": "asc"}}]
    body: dict[str, Any] = {
        "query": {"bool": {"filter": filters, "must": must or [{"match_all": {}}]}},
        "sort": sort,
        "size": query.limit,
        "_source": SOURCE_FIELDS,
        "track_total_hits": False,
        "track_scores": bool(query.q),
    }
    if query.cursor is not None:
        body["search_after"] = decode_cursor(mode, query.cursor)
    return mode, body


class Searcher:
    """Runs ``SearchQuery`` against the alias."""

    def __init__(self, es: SearchEngine, alias: str) -> None:
        self.es = es
        self.alias = alias

    def index_lost(self) -> str | None:
        """Why search cannot be trusted when the alias is gone although the indexer has
        checkpoints past the start (the caller checked); None when it is there or the
        server does not answer (search requests report that themselves)."""
        try:
            if alias_targets(self.es, self.alias):
                return None
            return missing_alias_message(self.alias, True, our_indices(self.es, self.alias))
        except SearchError:
            return None

    def reachable(self, timeout: float) -> bool:
        """Whether the search server answers within ``timeout`` seconds (a refusal of the
        request counts as an answer, a server error does not)."""
        try:
            self.es.health(timeout)
        except SearchRefused as exc:
            return exc.status < 500
        except SearchError:
            return False
        return True

    def refresh(self) -> None:
        """Make everything indexed so far searchable (used after a ``min_seq`` wait)."""
        try:
            self.es.refresh(self.alias)
        except SearchError as exc:
            raise Unavailable(f"search unavailable: {exc}") from exc

    def search(self, query: SearchQuery) -> SearchOut:
        mode, body = build_body(query)
        try:
            resp = self.es.search(self.alias, body, routing=query.namespace)
        except SearchRefused as exc:
            if exc.status == 400 and query.cursor is not None:
                raise invalid_cursor() from exc
            if exc.status == 404:  # no index yet: nothing was ever indexed
                return SearchOut(hits=[], cursor=None)
            if exc.status == 429:
                raise ServiceError(429, "overloaded", "search is overloaded") from exc
            raise Unavailable(f"search failed: {exc.status}") from exc
        except (SearchUnavailable, UnsupportedEngine) as exc:
            raise Unavailable(f"search unavailable: {exc}") from exc
        raw_hits = resp["hits"]["hits"]
        hits = [
            SearchHit(
                node_id=h["_source"]["node_id"],
                path=h["_source"]["path"],
                name=h["_source"]["name"],
                kind=h["_source"]["kind"],
                parent_id=h["_source"].get("parent_id"),
                seq=int(h["_source"]["seq"]),
                score=h.get("_score"),
            )
            for h in raw_hits
        ]
        cursor = (
            encode_cursor(mode, list(raw_hits[-1]["sort"]))
            if len(raw_hits) == query.limit and raw_hits
            else None
        )
        return SearchOut(hits=hits, cursor=cursor)
