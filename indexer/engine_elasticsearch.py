"""The search seam (``indexer.search_engine``) on Elasticsearch 8 and 9, through the
``elasticsearch`` 8.x client (it sends compatible-with-8 headers, which 9 accepts)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout
from elasticsearch import ApiError, Elasticsearch
from elasticsearch.helpers import streaming_bulk

from .search_engine import (
    SearchUnavailable,
    error_of,
    refused,
    server_address,
    unreachable,
)

T = TypeVar("T")


@contextmanager
def _typed_errors(where: str) -> Iterator[None]:
    """The seam's errors for the client's; ``where``: the server, for messages."""
    try:
        yield
    except ApiError as exc:
        error, reason = error_of(exc.body)
        if exc.meta.status == 401:
            reason = f"the search server at {where} refused the credentials: {reason}"
        raise refused(exc.meta.status, error or str(exc.message), reason, exc.body) from exc
    except TransportConnectionError as exc:  # a TlsError too
        raise unreachable(where, str(exc)) from exc
    except ConnectionTimeout as exc:
        raise SearchUnavailable(str(exc)) from exc


class ElasticsearchEngine:
    family = "elasticsearch"

    def __init__(self, client: Elasticsearch, where: str = "") -> None:
        self.client = client
        self.where = where or "(client's node)"

    @classmethod
    def connect(cls, url: str, **options: Any) -> ElasticsearchEngine:
        """A client of ``url``; ``options``: the client's, credentials (``basic_auth``,
        ``api_key``) and CA (``ca_certs``) included."""
        return cls(Elasticsearch(url, **options), server_address(url))

    def _call(self, fn: Callable[..., T], **kwargs: Any) -> T:
        with _typed_errors(self.where):
            return fn(**kwargs)

    def _body(self, fn: Callable[..., Any], **kwargs: Any) -> dict[str, Any]:
        with _typed_errors(self.where):
            found = fn(**kwargs)
        return dict(found.body)

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------ documents

    def bulk(self, operations: bytes | list[Any], **params: Any) -> dict[str, Any]:
        return self._body(self.client.bulk, operations=operations, **params)

    def streaming_bulk(
        self, actions: Iterable[dict[str, Any]], *, chunk_size: int, max_chunk_bytes: int,
        max_retries: int, initial_backoff: float, max_backoff: float, **params: Any,
    ) -> Iterator[tuple[bool, dict[str, Any]]]:
        with _typed_errors(self.where):
            yield from streaming_bulk(
                self.client, actions, chunk_size=chunk_size, max_chunk_bytes=max_chunk_bytes,
                raise_on_error=False, raise_on_exception=True, max_retries=max_retries,
                initial_backoff=initial_backoff, max_backoff=max_backoff, **params,
            )

    def search(self, index: str | None, body: dict[str, Any], *,
               routing: str | None = None) -> dict[str, Any]:
        extra = {} if routing is None else {"routing": routing}
        return self._body(self.client.search, index=index, body=body, **extra)

    def count(self, index: str, body: dict[str, Any] | None = None) -> int:
        return int(self._body(self.client.count, index=index, body=body)["count"])

    def get(self, index: str, id: str, **params: Any) -> dict[str, Any]:
        return self._body(self.client.get, index=index, id=id, **params)

    def exists(self, index: str, id: str, *, routing: str | None = None) -> bool:
        return bool(self._call(self.client.exists, index=index, id=id, routing=routing))

    def mget(self, docs: list[dict[str, Any]], *, index: str | None = None,
             **params: Any) -> dict[str, Any]:
        return self._body(self.client.mget, index=index, docs=docs, **params)

    def index(self, index: str, id: str, document: dict[str, Any],
              **params: Any) -> dict[str, Any]:
        return self._body(self.client.index, index=index, id=id, document=document, **params)

    def update(self, index: str, id: str, doc: dict[str, Any], **params: Any) -> dict[str, Any]:
        return self._body(self.client.update, index=index, id=id, doc=doc, **params)

    def delete(self, index: str, id: str, **params: Any) -> dict[str, Any]:
        return self._body(self.client.delete, index=index, id=id, **params)

    # ------------------------------------------------------------ indices and aliases

    def create_index(self, index: str, *, settings: dict[str, Any] | None = None,
                     mappings: dict[str, Any] | None = None,
                     aliases: dict[str, Any] | None = None) -> None:
        self._call(self.client.indices.create, index=index, settings=settings,
                   mappings=mappings, aliases=aliases)

    def index_exists(self, index: str) -> bool:
        return bool(self._call(self.client.indices.exists, index=index))

    def get_indices(self, pattern: str) -> dict[str, Any]:
        return self._body(self.client.indices.get, index=pattern, expand_wildcards="all")

    def get_alias(self, name: str) -> dict[str, Any]:
        return self._body(self.client.indices.get_alias, name=name)

    def update_aliases(self, actions: list[dict[str, Any]]) -> None:
        self._call(self.client.indices.update_aliases, actions=actions)

    def put_settings(self, index: str, settings: dict[str, Any]) -> None:
        self._call(self.client.indices.put_settings, index=index, settings=settings)

    def get_settings(self, index: str) -> dict[str, Any]:
        return self._body(self.client.indices.get_settings, index=index)

    def get_mapping(self, index: str) -> dict[str, Any]:
        return self._body(self.client.indices.get_mapping, index=index)

    def refresh(self, index: str) -> None:
        self._call(self.client.indices.refresh, index=index)

    def delete_index(self, index: str) -> None:
        self._call(self.client.indices.delete, index=index)

    def index_stats(self, index: str) -> dict[str, Any]:
        return self._body(self.client.indices.stats, index=index)

    # ------------------------------------------------------------ point in time

    def open_point_in_time(self, index: str, keep_alive: str) -> str:
        return str(self._body(self.client.open_point_in_time, index=index,
                              keep_alive=keep_alive)["id"])

    def close_point_in_time(self, pit_id: str) -> None:
        self._call(self.client.close_point_in_time, id=pit_id)

    # ------------------------------------------------------------ cluster

    def cluster_settings(self, filter_path: str) -> dict[str, Any]:
        return self._body(self.client.cluster.get_settings, include_defaults=True,
                          filter_path=filter_path)

    def health(self, timeout: float) -> None:
        self._call(self.client.options(request_timeout=timeout).cluster.health)
