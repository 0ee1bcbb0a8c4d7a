"""The seam between Pathkeeper and a search server: every call the worker, bulk,
replay, reindex, verify, dead letters, index scans, snapshots and HTTP search make,
and the errors they can meet, in Pathkeeper's own terms.

One adapter per engine family implements it (``engine_elasticsearch``: Elasticsearch
8 and 9; ``engine_opensearch``: OpenSearch 2 and 3); ``search_client.open_search``
picks one from what the server says it is. No module outside the adapters imports an
engine's client library. What goes into the calls (documents, queries, mappings, the
version rule) is the contract's (``indexer.contract``), the same for every engine.

Bodies and answers are plain JSON values (dicts): the REST API both families share.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from coordinator.errors import InvalidConfiguration

from .errors import IndexerError

#: The engines and major versions Pathkeeper is tested on.
SUPPORTED = {"elasticsearch": (8, 9), "opensearch": (2, 3)}
ENGINES = tuple(SUPPORTED)


def supported_text() -> str:
    return "Elasticsearch 8.x, 9.x; OpenSearch 2.x, 3.x"


class SearchError(IndexerError):
    """A call to the search server failed."""


class SearchUnavailable(SearchError):
    """The search server could not be reached, or did not answer in time. ``where``:
    the server (scheme, host, port) when known."""

    def __init__(self, message: str, where: str = "") -> None:
        self.where = where
        super().__init__(message)


class SearchTlsFailed(SearchUnavailable):
    """The TLS handshake with the search server failed: its certificate is not signed
    by a CA we trust, or one side speaks TLS and the other does not. Its message names
    the server and the failure."""


class SearchRefused(SearchError):
    """The search server answered with an error status.

    ``status``: the HTTP status; ``error``: the server's error type (e.g.
    ``resource_already_exists_exception``), "" when it named none; ``reason``: its
    message."""

    def __init__(self, status: int, error: str = "", reason: str = "",
                 body: Any = None) -> None:
        self.status = status
        self.error = error
        self.reason = reason
        self.body = body
        super().__init__(f"{status} {error}: {reason}" if error else f"{status}: {reason}")


class SearchAuthFailed(SearchRefused):
    """401: the search server did not accept the credentials (or wanted some)."""


class SearchNotFound(SearchRefused):
    """404: no such index, alias or document."""


class SearchConflict(SearchRefused):
    """409: a version or compare-and-swap conflict, or the document already exists."""


def server_address(url: str) -> str:
    """``url`` as messages may show it: scheme, host and port, never credentials."""
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.scheme}://{host}" if parts.scheme else host


_VERIFY_FAILED = re.compile(r"certificate verify failed: ([^(\]'\"]+)")
_NOT_TLS = ("wrong version number", "record layer failure", "packet length too long",
            "unknown protocol", "http request")


def tls_problem(text: str) -> str | None:
    """What went wrong in a TLS handshake whose error reads ``text``, in words an
    operator can act on; None when ``text`` is no TLS failure."""
    verify = _VERIFY_FAILED.search(text)
    if verify:
        return (f"its certificate was not accepted ({verify.group(1).strip()}): give the "
                "CA that signs it with --search-ca-certs")
    lowered = text.lower()
    if "ssl" in lowered and any(marker in lowered for marker in _NOT_TLS):
        return "it does not speak TLS: use an http:// URL, or turn TLS on at the server"
    return None


def unreachable(where: str, text: str) -> SearchUnavailable:
    """The error of a call to the server at ``where`` that got no answer, its
    client's error reading ``text``: a ``SearchTlsFailed`` naming the server when TLS
    is what failed (or a plain-http request was dropped, as a TLS-only server does)."""
    problem = tls_problem(text)
    if problem is not None:
        return SearchTlsFailed(f"TLS with the search server at {where} failed: {problem}",
                               where)
    if where.startswith("http:") and "Remote end closed connection" in text:
        return SearchTlsFailed(
            f"the search server at {where} closed the connection without an answer; "
            "if it wants TLS, use an https:// URL", where,
        )
    return SearchUnavailable(text, where)


def error_of(body: Any) -> tuple[str, str]:
    """(type, reason) of an error answer's body (``{"error": {"type", "reason"}}``)."""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            return str(err.get("type") or ""), str(err.get("reason") or "")
        if err is not None:
            return "", str(err)
    return "", str(body or "")


def refused(status: int, error: str = "", reason: str = "", body: Any = None) -> SearchRefused:
    """The typed error of an error answer."""
    kind = {401: SearchAuthFailed, 404: SearchNotFound, 409: SearchConflict}.get(
        status, SearchRefused)
    return kind(status, error, reason, body)


class UnsupportedEngine(InvalidConfiguration, SearchError):
    """The server is not an engine (or a version) Pathkeeper supports, or the
    configuration names an engine it does not know. A configuration error (the CLI's
    one ``error:`` line), and a failed search call to whoever only handles those."""


class SearchEngine(Protocol):
    """One search server, whatever its engine. Every method raises ``SearchRefused``
    (``SearchNotFound``, ``SearchConflict``) for an error answer and
    ``SearchUnavailable`` when the server cannot be reached."""

    #: "elasticsearch" or "opensearch".
    family: str

    def close(self) -> None: ...

    # ------------------------------------------------------------ documents

    def bulk(self, operations: bytes | list[Any], **params: Any) -> dict[str, Any]:
        """One ``_bulk`` request of ``operations`` (its lines, or the body as bytes, sent
        as they are); ``params``: the request's (``refresh``, ``require_alias``)."""
        ...

    def streaming_bulk(
        self, actions: Iterable[dict[str, Any]], *, chunk_size: int, max_chunk_bytes: int,
        max_retries: int, initial_backoff: float, max_backoff: float, **params: Any,
    ) -> Iterator[tuple[bool, dict[str, Any]]]:
        """``actions`` (helper style: ``_op_type``, ``_index``, ``_id``, ``_source``...)
        in chunks, as (ok, answer item) per action; items refused with 429 are retried
        ``max_retries`` times with backoff. An error answer to a whole request raises."""
        ...

    def search(self, index: str | None, body: dict[str, Any], *,
               routing: str | None = None) -> dict[str, Any]:
        """``_search`` of ``index`` (None with a point in time in ``body``)."""
        ...

    def count(self, index: str, body: dict[str, Any] | None = None) -> int: ...

    def get(self, index: str, id: str, **params: Any) -> dict[str, Any]:
        """The document (``routing``, ``source_includes``, ``realtime``); raises
        ``SearchNotFound``."""
        ...

    def exists(self, index: str, id: str, *, routing: str | None = None) -> bool: ...

    def mget(self, docs: list[dict[str, Any]], *, index: str | None = None,
             **params: Any) -> dict[str, Any]: ...

    def index(self, index: str, id: str, document: dict[str, Any],
              **params: Any) -> dict[str, Any]:
        """Write a document (``routing``, ``version``/``version_type``,
        ``if_seq_no``/``if_primary_term``, ``op_type``, ``refresh``)."""
        ...

    def update(self, index: str, id: str, doc: dict[str, Any], **params: Any) -> dict[str, Any]:
        ...

    def delete(self, index: str, id: str, **params: Any) -> dict[str, Any]: ...

    # ------------------------------------------------------------ indices and aliases

    def create_index(self, index: str, *, settings: dict[str, Any] | None = None,
                     mappings: dict[str, Any] | None = None,
                     aliases: dict[str, Any] | None = None) -> None: ...

    def index_exists(self, index: str) -> bool: ...

    def get_indices(self, pattern: str) -> dict[str, Any]:
        """Indices matching ``pattern`` (hidden and closed ones too), by name."""
        ...

    def get_alias(self, name: str) -> dict[str, Any]:
        """The indices alias ``name`` points to, by name; raises ``SearchNotFound``."""
        ...

    def update_aliases(self, actions: list[dict[str, Any]]) -> None: ...

    def put_settings(self, index: str, settings: dict[str, Any]) -> None: ...

    def get_settings(self, index: str) -> dict[str, Any]: ...

    def get_mapping(self, index: str) -> dict[str, Any]: ...

    def refresh(self, index: str) -> None: ...

    def delete_index(self, index: str) -> None: ...

    def index_stats(self, index: str) -> dict[str, Any]: ...

    # ------------------------------------------------------------ point in time

    def open_point_in_time(self, index: str, keep_alive: str) -> str:
        """The id of a new point in time over ``index``."""
        ...

    def close_point_in_time(self, pit_id: str) -> None: ...

    # ------------------------------------------------------------ cluster

    def cluster_settings(self, filter_path: str) -> dict[str, Any]:
        """Cluster settings, defaults included, filtered by ``filter_path``."""
        ...

    def health(self, timeout: float) -> None:
        """Ask for the cluster's health within ``timeout`` seconds: returns when the
        server answered, raises ``SearchUnavailable`` or ``SearchRefused`` otherwise."""
        ...
