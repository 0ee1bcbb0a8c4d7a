"""The search seam (``indexer.search_engine``) on OpenSearch 2 and 3, through
``opensearch-py`` (the ``elasticsearch`` client refuses OpenSearch servers).

Differences from Elasticsearch this adapter hides: request bodies go in ``body=``;
source filters are ``_source_includes``; a point in time is ``create_pit`` /
``delete_pit`` (``/_search/point_in_time``) and answers ``pit_id``; errors carry
``status_code`` / ``info`` and connection failures are a ``TransportError`` too."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConnectionError as OpenSearchConnectionError
from opensearchpy.exceptions import TransportError
from opensearchpy.helpers import streaming_bulk

from coordinator.errors import InvalidConfiguration

from .search_engine import (
    SearchUnavailable,
    error_of,
    refused,
    server_address,
    unreachable,
)

#: Parameter names of the seam that opensearch-py spells differently.
_PARAM_NAMES = {"source_includes": "_source_includes", "source_excludes": "_source_excludes"}


def _params(params: dict[str, Any]) -> dict[str, Any]:
    return {_PARAM_NAMES.get(k, k): v for k, v in params.items() if v is not None}


@contextmanager
def _typed_errors(where: str) -> Iterator[None]:
    """The seam's errors for the client's; ``where``: the server, for messages."""
    try:
        yield
    except OpenSearchConnectionError as exc:  # before TransportError: it is one
        raise unreachable(where, str(exc)) from exc
    except TransportError as exc:
        status = exc.status_code
        if not isinstance(status, int):
            raise SearchUnavailable(str(exc)) from exc
        error, reason = error_of(exc.info)
        if status == 401:
            reason = f"the search server at {where} refused the credentials: {reason}"
        raise refused(status, error or str(exc.error), reason, exc.info) from exc


class OpenSearchEngine:
    family = "opensearch"

    def __init__(self, client: OpenSearch, where: str = "") -> None:
        self.client = client
        self.where = where or "(client's node)"

    @classmethod
    def connect(cls, url: str, **options: Any) -> OpenSearchEngine:
        """A client of ``url``; ``options`` named as the Elasticsearch client names them
        (``request_timeout``, ``connections_per_node``, ``basic_auth``) are translated.
        OpenSearch takes no API key of Elasticsearch's kind: one is refused."""
        if "api_key" in options:
            raise InvalidConfiguration(
                "OpenSearch takes no Elasticsearch API key: give it a user and password "
                "(--search-user, --search-password)"
            )
        renamed = {"request_timeout": "timeout", "connections_per_node": "pool_maxsize",
                   "basic_auth": "http_auth"}
        if "ca_certs" in options:
            options = {**options, "verify_certs": True}
        return cls(OpenSearch(url, **{renamed.get(k, k): v for k, v in options.items()}),
                   server_address(url))

    def _call(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        with _typed_errors(self.where):
            return fn(**kwargs)

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------ documents

    def bulk(self, operations: bytes | list[Any], **params: Any) -> dict[str, Any]:
        return dict(self._call(self.client.bulk, body=operations, **_params(params)))

    def streaming_bulk(
        self, actions: Iterable[dict[str, Any]], *, chunk_size: int, max_chunk_bytes: int,
        max_retries: int, initial_backoff: float, max_backoff: float, **params: Any,
    ) -> Iterator[tuple[bool, dict[str, Any]]]:
        with _typed_errors(self.where):
            yield from streaming_bulk(
                self.client, actions, chunk_size=chunk_size, max_chunk_bytes=max_chunk_bytes,
                raise_on_error=False, raise_on_exception=True, max_retries=max_retries,
                # Typed int by opensearch-py, used as seconds to sleep: a float works.
                initial_backoff=initial_backoff,  # type: ignore[arg-type]
                max_backoff=max_backoff,  # type: ignore[arg-type]
                **_params(params),
            )

    def search(self, index: str | None, body: dict[str, Any], *,
               routing: str | None = None) -> dict[str, Any]:
        return dict(self._call(self.client.search, index=index, body=body,
                               **_params({"routing": routing})))

    def count(self, index: str, body: dict[str, Any] | None = None) -> int:
        return int(self._call(self.client.count, index=index, body=body)["count"])

    def get(self, index: str, id: str, **params: Any) -> dict[str, Any]:
        return dict(self._call(self.client.get, index=index, id=id, **_params(params)))

    def exists(self, index: str, id: str, *, routing: str | None = None) -> bool:
        return bool(self._call(self.client.exists, index=index, id=id,
                               **_params({"routing": routing})))

    def mget(self, docs: list[dict[str, Any]], *, index: str | None = None,
             **params: Any) -> dict[str, Any]:
        return dict(self._call(self.client.mget, index=index, body={"docs": docs},
                               **_params(params)))

    def index(self, index: str, id: str, document: dict[str, Any],
              **params: Any) -> dict[str, Any]:
        return dict(self._call(self.client.index, index=index, id=id, body=document,
                               **_params(params)))

    def update(self, index: str, id: str, doc: dict[str, Any], **params: Any) -> dict[str, Any]:
        return dict(self._call(self.client.update, index=index, id=id, body={"doc": doc},
                               **_params(params)))

    def delete(self, index: str, id: str, **params: Any) -> dict[str, Any]:
        return dict(self._call(self.client.delete, index=index, id=id, **_params(params)))

    # ------------------------------------------------------------ indices and aliases

    def create_index(self, index: str, *, settings: dict[str, Any] | None = None,
                     mappings: dict[str, Any] | None = None,
                     aliases: dict[str, Any] | None = None) -> None:
        body = {k: v for k, v in (("settings", settings), ("mappings", mappings),
                                  ("aliases", aliases)) if v is not None}
        self._call(self.client.indices.create, index=index, body=body)

    def index_exists(self, index: str) -> bool:
        return bool(self._call(self.client.indices.exists, index=index))

    def get_indices(self, pattern: str) -> dict[str, Any]:
        return dict(self._call(self.client.indices.get, index=pattern, expand_wildcards="all"))

    def get_alias(self, name: str) -> dict[str, Any]:
        return dict(self._call(self.client.indices.get_alias, name=name))

    def update_aliases(self, actions: list[dict[str, Any]]) -> None:
        self._call(self.client.indices.update_aliases, body={"actions": actions})

    def put_settings(self, index: str, settings: dict[str, Any]) -> None:
        self._call(self.client.indices.put_settings, index=index, body=settings)

    def get_settings(self, index: str) -> dict[str, Any]:
        return dict(self._call(self.client.indices.get_settings, index=index))

    def get_mapping(self, index: str) -> dict[str, Any]:
        return dict(self._call(self.client.indices.get_mapping, index=index))

    def refresh(self, index: str) -> None:
        self._call(self.client.indices.refresh, index=index)

    def delete_index(self, index: str) -> None:
        self._call(self.client.indices.delete, index=index)

    def index_stats(self, index: str) -> dict[str, Any]:
        return dict(self._call(self.client.indices.stats, index=index))

    # ------------------------------------------------------------ point in time

    def open_point_in_time(self, index: str, keep_alive: str) -> str:
        return str(self._call(self.client.create_pit, index=index,
                              keep_alive=keep_alive)["pit_id"])

    def close_point_in_time(self, pit_id: str) -> None:
        self._call(self.client.delete_pit, body={"pit_id": [pit_id]})

    # ------------------------------------------------------------ cluster

    def cluster_settings(self, filter_path: str) -> dict[str, Any]:
        return dict(self._call(self.client.cluster.get_settings, include_defaults=True,
                               filter_path=filter_path))

    def health(self, timeout: float) -> None:
        self._call(self.client.cluster.health, request_timeout=timeout)
