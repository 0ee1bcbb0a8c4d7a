"""``Client``: the HTTP API behind the method names and typed errors of ``Coordinator``.

Switching a service from in-process to remote is one line::

    coord = Coordinator.connect(url)          # in-process
    coord = Client("http://pathkeeper:8080", api_key="pk_...")   # over HTTP

Mutations send an ``Idempotency-Key`` generated once per call and reused on every
retry, so a retry after a timeout or a dropped connection returns the original
result instead of applying twice. Retried: transport errors, 429 and 503 (after
``Retry-After``, capped). ``transaction()`` collects the block's commands and sends them
as one batch when the block ends (all or nothing, as ``apply``): a step's result is known
only then (``Pending.result``, ``RemoteTransaction.results``), so a step cannot use the
one before it. Not offered remotely: ``walk`` snapshots (``walk`` here lists page by
page, without file content).
"""

from __future__ import annotations

import dataclasses
import random
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from coordinator import errors as ce
from coordinator.commands import Command, GroupCommands, NamespaceCommands
from coordinator.results import (
    Committed,
    Event,
    MutationResult,
    Node,
    SearchHit,
    SearchPage,
    Start,
)
from pathkeeper.http.cursors import encode_name_cursor
from pathkeeper.http.operations import NAMESPACE_URL, NODE_BY_ID, NODE_BY_PATH, REF, ROUTE_OF


class Unauthorized(ce.CoordinatorError):
    """The API key is missing, invalid or revoked (HTTP 401)."""

    code = "unauthorized"


class Forbidden(ce.CoordinatorError):
    """The API key lacks the scope for this operation (HTTP 403)."""

    code = "forbidden"


class InvalidRequest(ce.InvalidName):
    """The request is malformed: refused by the server (HTTP 400/422 without a tree
    error), or by the client before sending (a namespace or node id that cannot be a URL
    segment)."""

    code = "invalid_request"


def _error_classes() -> dict[str, type[ce.CoordinatorError]]:
    found: dict[str, type[ce.CoordinatorError]] = {}
    stack: list[type[ce.CoordinatorError]] = [ce.CoordinatorError]
    while stack:
        cls = stack.pop()
        found.setdefault(cls.code, cls)
        stack.extend(cls.__subclasses__())
    return found


ERRORS = _error_classes()
#: Service-level codes, mapped to the closest coordinator error.
ERRORS.update({
    "overloaded": ce.Unavailable,
    # A failed If-Match (412): the coordinator's Conflict, as in-process.
    "precondition_failed": ce.Conflict,
    "index_lagging": ce.Unavailable,
    "invalid_cursor": InvalidRequest,
    "method_not_allowed": InvalidRequest,
    "http_error": ce.CoordinatorError,
})
RETRY_STATUSES = (429, 503)


def _time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def node_of(data: dict[str, Any]) -> Node:
    return Node(
        id=data["id"], namespace=data["namespace"], parent_id=data.get("parent_id"),
        name=data["name"], kind=data["kind"], version=int(data["version"]),
        path=data["path"], content=data.get("content"), metadata=data.get("metadata") or {},
        created_at=_time(data.get("created_at")), updated_at=_time(data.get("updated_at")),
    )


def result_of(data: dict[str, Any]) -> MutationResult:
    seq = data.get("seq")
    return MutationResult(node_of(data["node"]), None if seq is None else Committed(seq))


def page_of(data: dict[str, Any]) -> SearchPage:
    return SearchPage(hits=[SearchHit(**hit) for hit in data["hits"]], cursor=data.get("cursor"))


@dataclass
class Pending:
    """A step of a ``Client.transaction``: its result once the group committed (None
    before, and for ever when the group failed)."""

    index: int
    result: MutationResult | None = None


class RemoteTransaction(GroupCommands[Pending]):
    """The commands of a ``Client.transaction`` block, sent as one batch at its end."""

    def __init__(self) -> None:
        self.commands: list[Command] = []
        self.steps: list[Pending] = []
        #: Every step's result, in order, once the group committed.
        self.results: list[MutationResult] = []

    def execute(self, command: Command) -> Pending:
        step = Pending(len(self.commands))
        self.commands.append(command)
        self.steps.append(step)
        return step


def error_of(response: httpx.Response) -> ce.CoordinatorError:
    """The typed error an error response stands for (``.status`` and ``.index`` set)."""
    try:
        detail = response.json()["error"]
        code, message = str(detail["code"]), str(detail["message"])
        index = detail.get("index")
        # A refused import lists its bad lines.
        lines = tuple((int(x["line"]), str(x["message"])) for x in detail.get("lines") or ())
    except (ValueError, KeyError, TypeError):
        code, message, index, lines = "http_error", response.text[:500], None, ()
    cls = ERRORS.get(code)
    if cls is None:
        cls = InvalidRequest if response.status_code in (400, 422) else ce.CoordinatorError
    try:
        exc = cls(message)
    except TypeError:  # its own fields (a cursor error's positions): the message only
        exc = cls.__new__(cls)
        ce.CoordinatorError.__init__(exc, message)
    exc.lines = lines
    exc.status = response.status_code  # type: ignore[attr-defined]
    exc.index = index
    return exc


class Client(NamespaceCommands):
    """The ``Coordinator`` API over HTTP. Thread-safe (one ``httpx.Client`` pool)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        max_backoff: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.retries = retries
        self.max_backoff = max_backoff
        self.http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ transport

    def request(
        self, method: str, url: str, *, mutation: bool = False, json: Any = None,
        params: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send with retries; returns the decoded JSON body or raises a typed error."""
        headers = dict(headers or {})
        if mutation:
            headers.setdefault("Idempotency-Key", uuid.uuid4().hex)
        params = {k: v for k, v in (params or {}).items() if v is not None}
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = self.http.request(
                    method, url, json=json, params=params, headers=headers, **extra
                )
            except httpx.TransportError as exc:
                if last:
                    raise ce.Unavailable(f"{method} {url}: {exc}") from exc
                self._sleep(attempt, None)
                continue
            if response.status_code in RETRY_STATUSES and not last:
                self._sleep(attempt, response.headers.get("Retry-After"))
                continue
            if response.status_code >= 400:
                raise error_of(response)
            return response.json()
        raise AssertionError("unreachable")

    def _sleep(self, attempt: int, retry_after: str | None) -> None:
        delay = min(self.max_backoff, 0.05 * 2**attempt) * (0.5 + random.random())
        if retry_after and retry_after.isdigit():
            delay = min(self.max_backoff, max(delay, float(retry_after)))
        time.sleep(delay)

    @staticmethod
    def _ns(ns: str) -> str:
        return NAMESPACE_URL.format(ns=_segment(ns, "namespace"))

    def _node(self, ns: str, ref: str, suffix: str = "") -> tuple[str, dict[str, Any]]:
        """URL and params for a node named by path (starts with '/') or by id."""
        if ref.startswith("/"):
            return f"{self._ns(ns)}{NODE_BY_PATH}{suffix}", {"path": ref}
        node = NODE_BY_ID.format(node_id=_segment(ref, "node id"))
        return f"{self._ns(ns)}{node}{suffix}", {}

    # ----------------------------------------------------------- namespaces

    def create_namespace(self, name: str) -> MutationResult:
        return result_of(self.request("POST", "/v1/namespaces", json={"name": name}))

    def drop_namespace(self, name: str, force: bool = False) -> MutationResult:
        return result_of(self.request("DELETE", self._ns(name), params={"force": force}))

    def namespaces(self) -> list[str]:
        return list(self.request("GET", "/v1/namespaces")["namespaces"])

    # ------------------------------------------------------------ mutations

    def execute(self, ns: str, command: Command) -> MutationResult:
        """One command over its own route (``pathkeeper.http.operations``), the node
        named by path or by id as ``ref`` says."""
        route = ROUTE_OF[type(command)]
        values = {name: getattr(command, name) for name in route.fields}
        if route.by_node:
            url, params = self._node(ns, values[REF], route.suffix)
        else:
            url, params = f"{self._ns(ns)}{route.suffix}", {}
        params.update((name, values[name]) for name in route.query)
        body = {name: values[name] for name in route.body} or None
        return result_of(
            self.request(route.method, url, params=params, mutation=True, json=body)
        )

    def import_nodes(self, ns: str, source: Iterable[bytes | str]) -> dict[str, Any]:
        """``Coordinator.import_nodes`` over HTTP: the lines are streamed as the request
        body (chunked), never held whole. Not retried: the source is read once; a
        failed import wrote nothing, so running it again is safe. Returns the answer
        (``created``, ``first_seq``, ``last_seq``, ...)."""

        def body() -> Iterator[bytes]:
            for line in source:
                data = line.encode("utf-8") if isinstance(line, str) else line
                yield data if data.endswith(b"\n") else data + b"\n"

        try:
            response = self.http.post(
                f"{self._ns(ns)}/import", content=body(),
                headers={"Content-Type": "application/x-ndjson"}, timeout=None,
            )
        except httpx.TransportError as exc:
            raise ce.Unavailable(f"POST {self._ns(ns)}/import: {exc}") from exc
        if response.status_code >= 400:
            raise error_of(response)
        result: dict[str, Any] = response.json()
        return result

    def apply(self, namespace: str, commands: Sequence[Command]) -> list[MutationResult]:
        """Apply commands atomically; a failure raises the error of the first failing
        command, with its position in ``.index``."""
        body = {"operations": [dataclasses.asdict(c) for c in commands]}
        data = self.request("POST", f"{self._ns(namespace)}/batch", mutation=True, json=body)
        return [result_of(r) for r in data["results"]]

    @contextmanager
    def transaction(self, namespace: str) -> Iterator[RemoteTransaction]:
        """Several changes to one namespace, all or nothing: the block's commands are sent
        as one batch (``apply``) when it ends without an exception (nothing is sent when
        it raises); a failing command raises its error with its position in ``.index``
        and nothing of the group is applied."""
        group = RemoteTransaction()
        yield group
        if not group.commands:
            return
        group.results = self.apply(namespace, group.commands)
        for step, result in zip(group.steps, group.results, strict=True):
            step.result = result

    # ---------------------------------------------------------------- reads

    def stat(self, ns: str, path: str) -> Node:
        url, params = self._node(ns, path)
        return node_of(self.request("GET", url, params=params))

    def get(self, ns: str, node_id: str) -> Node:
        url, params = self._node(ns, node_id)
        return node_of(self.request("GET", url, params=params))

    def listdir(
        self, ns: str, path: str = "/", after: str | None = None, limit: int | None = None
    ) -> list[Node]:
        """Children by name; without ``limit``, every page."""
        url, params = self._node(ns, path, "/children")
        cursor = encode_name_cursor(after) if after is not None else None
        out: list[Node] = []
        while True:
            page_size = 1000 if limit is None else min(1000, limit - len(out))
            data = self.request("GET", url, params={**params, "cursor": cursor,
                                                    "limit": page_size})
            out.extend(node_of(n) for n in data["nodes"])
            cursor = data.get("cursor")
            if cursor is None or (limit is not None and len(out) >= limit):
                return out

    def walk(self, ns: str, path: str = "/", batch: int = 1000) -> Iterator[Node]:
        """The subtree depth first, page by page (not one snapshot; no file content)."""
        top = self.stat(ns, path)
        yield top
        if top.is_dir:
            for child in self.listdir(ns, top.path):
                yield from self.walk(ns, child.path) if child.is_dir else iter([child])

    def read_events(
        self, after: int | Start | None = None, limit: int = 1000, *,
        namespaces: Sequence[str] | None = None, partition: object = None,
        until: int | None = None, wait: float = 5.0,
    ) -> tuple[list[Event], int]:
        """One namespace's events after ``after``; ``wait`` long-polls for the first."""
        if namespaces is None or len(namespaces) != 1 or partition is not None or until:
            raise NotImplementedError("over HTTP, read_events follows exactly one namespace")
        data = self.request(
            "GET", f"{self._ns(namespaces[0])}/events",
            params={"after": None if after is None else str(after), "limit": min(limit, 1000),
                    "wait": wait},
            timeout=self.http.timeout.read + wait if self.http.timeout.read else None,
        )
        events = [
            Event(position=int(e["position"]), namespace=e["namespace"], type=e["type"],
                  node_id=e.get("node_id"), payload=e["payload"],
                  committed_at=datetime.fromisoformat(e["committed_at"]))
            for e in data["events"]
        ]
        return events, int(data["cursor"])

    def wait_indexed(self, seq: int, timeout: float = 10.0) -> bool:
        """True once the indexer has applied every event up to ``seq``; False after
        ``timeout`` (capped by the server)."""
        data = self.request("GET", "/v1/indexed", params={"seq": seq, "timeout": timeout},
                            timeout=(self.http.timeout.read or 0) + timeout)
        return bool(data["indexed"])

    def search(
        self, ns: str, q: str | None = None, *, under: str | None = None,
        dir: str | None = None, kind: str | None = None, limit: int = 20,
        cursor: str | None = None, min_seq: int | None = None,
    ) -> SearchPage:
        """One page of search results (``.hits``, and ``.cursor`` for the next page)."""
        return page_of(self.request(
            "GET", f"{self._ns(ns)}/search",
            params={"q": q, "under": under, "dir": dir, "kind": kind, "limit": limit,
                    "cursor": cursor, "min_seq": min_seq},
        ))


def _segment(value: str, what: str) -> str:
    """``value`` as one percent-encoded path segment.

    ``.`` and ``..`` are refused: every HTTP stack (httpx itself, proxies) may resolve
    them against the URL, so ``/nodes/..`` would reach ``DELETE /v1/namespaces/{ns}``.
    A ``/`` is refused too: neither a namespace nor a node id contains one, and the
    server's router would decode ``%2F`` into a second segment."""
    if not isinstance(value, str) or value in ("", ".", "..") or "/" in value:
        raise InvalidRequest(f"{what} {value!r} is not valid (it cannot be a URL segment)")
    return quote(value, safe="")


__all__ = ["Client", "Forbidden", "InvalidRequest", "Pending", "RemoteTransaction",
           "Unauthorized", "error_of"]
