"""Sending bulk actions to the search server and sorting out what each answer means.

Each action is serialised once, to the bytes of its lines in a ``_bulk`` body
(``encode``; orjson), and a request is those bytes joined (``stream_answers``): no
document is turned into objects or serialised again between here and the wire.

Each answer is asked of the server filtered to what is read of it (``ANSWER_FILTER``:
the time, whether any item failed, each item's op, status and error). An answer that
says no item failed is counted from the actions' ops alone (``Answer.tally``); only
one with a failure is sorted out item by item.

Per item:

* 2xx: applied;
* 409 version conflict: the stored document is as new or newer: already applied;
  unless its stored ``seq`` says it reflects an older position than ours (it was
  edited outside the indexer, and its version ran ahead of its ``seq``): then it is
  replaced by compare-and-swap (``resolve_conflicts``). The rule is the search
  contract's (``indexer.contract.supersedes``);
  A conflict on an index action with nothing there is a tombstone at least as new:
  a real delete's, or one left by a delete by hand; ``alive`` (PostgreSQL) tells
  them apart, and a node that still exists is written back (``resolve_conflicts``);
* 404 on a delete without an error: the document was not there: nothing to do
  (the tombstone is still written);
* 429 or 5xx, or a missing index: transient: ``Retryable`` is raised and the whole
  batch is retried later (writes are idempotent);
* any other 4xx: the document can never be applied (e.g. rejected by the
  mapping): handed to ``on_reject`` (the dead-letter table) and the batch goes on.

A request the server refuses whole as larger than its limit (413,
``http.max_content_length``) is split in halves, each sent again, until the one
document that cannot fit in any request is alone: that one is handed to
``on_reject`` (status 413, its size) and the rest goes on (``send_halving``).
Any other transport error or error answer to the whole request propagates to the
caller, which retries the batch.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import orjson

from .contract import RENDERED, bulk_lines, source_of, supersedes
from .errors import IndexerError
from .prefetch import prefetched
from .search_engine import SearchConflict, SearchEngine, SearchNotFound, SearchRefused

#: ``alive(namespace, node_id)``: whether the node exists in PostgreSQL now (read after
#: the call: a statement of its own, not an older snapshot).
Alive = Callable[[str, str], bool]

CHUNK_ACTIONS = 1000
CHUNK_BYTES = 8 * 1024 * 1024
#: Bytes of one request of a subtree pass at most (its actions are counted too).
PASS_CHUNK_BYTES = 1024 * 1024
#: The status of a request larger than the server takes (``http.max_content_length``).
REQUEST_TOO_LARGE = 413


class Retryable(IndexerError):
    """Elasticsearch refused part of a batch for a reason that may pass (overload,
    server error, index missing): retry the whole batch later."""


@dataclass(frozen=True)
class Rejected:
    """One action Elasticsearch will never accept as it is."""

    namespace: str
    node_id: str
    version: int
    status: int
    error: str
    document: dict[str, Any] | None
    #: Bytes of the action as sent, for one too large for any request (status 413).
    size: int | None = None

    @property
    def too_large(self) -> bool:
        return self.status == REQUEST_TOO_LARGE


@dataclass
class BulkStats:
    indexed: int = 0
    deleted: int = 0
    already_newer: int = 0
    rejected: int = 0
    #: Documents whose version had run ahead of their ``seq`` (edited by hand),
    #: rewritten by compare-and-swap.
    overridden: int = 0

    @property
    def answered(self) -> bool:
        """Whether Elasticsearch answered any item (so the request reached the index)."""
        return bool(self.indexed or self.deleted or self.already_newer or self.rejected
                    or self.overridden)

    def __iadd__(self, other: BulkStats) -> BulkStats:
        self.indexed += other.indexed
        self.deleted += other.deleted
        self.already_newer += other.already_newer
        self.rejected += other.rejected
        self.overridden += other.overridden
        return self

    @property
    def total(self) -> int:
        return (self.indexed + self.deleted + self.already_newer + self.rejected
                + self.overridden)


def _error_text(info: dict[str, Any]) -> str:
    err = info.get("error")
    if isinstance(err, dict):
        return f"{err.get('type')}: {err.get('reason')}"
    return str(err)


#: An action with its lines in a ``_bulk`` body, serialised once: what a request
#: carries, what a halved request carries again, what a too-large one measures.
Encoded = tuple[dict[str, Any], bytes]


def _dumps(line: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(line, default=str)
    except orjson.JSONEncodeError:
        # What orjson refuses and the standard encoder takes (an integer beyond 64 bits
        # in a node's metadata): the same bytes the client's own encoder sent before.
        return json.dumps(line, ensure_ascii=False, separators=(",", ":"),
                          default=str).encode("utf-8", "surrogatepass")


def encode(action: dict[str, Any]) -> bytes:
    """The lines of ``action`` in a ``_bulk`` body (``contract.bulk_lines``), each
    ending in a newline, as UTF-8 JSON: the bytes a request sends as they are (those
    PostgreSQL rendered, ``contract.rendered_action``, as they came)."""
    rendered: bytes | None = action.get(RENDERED)
    if rendered is not None:
        return rendered
    return b"".join(_dumps(line) + b"\n" for line in bulk_lines(action))


def action_bytes(action: dict[str, Any]) -> int:
    """The bytes ``action`` takes in a ``_bulk`` body (its lines and their newlines)."""
    return len(encode(action))


def too_large(action: dict[str, Any]) -> Rejected:
    """The rejection of an action no request to the server can carry. Its document is
    not kept (it is what is too large; the node's row is where a retry reads it)."""
    size = action_bytes(action)
    return Rejected(
        namespace=str(action.get("routing", "")), node_id=str(action["_id"]),
        version=int(action["version"]), status=REQUEST_TOO_LARGE,
        error=f"document of {size} bytes is larger than the search server takes in one "
              "request (http.max_content_length)",
        document=None, size=size,
    )


def _refused_as_too_large(exc: Exception) -> bool:
    return isinstance(exc, SearchRefused) and exc.status == REQUEST_TOO_LARGE


#: What the worker reads of a ``_bulk`` answer, asked of the server as the request's
#: ``filter_path``: the server's time, whether any item failed, and each item's op
#: (the wildcard keeps it: ``index``, ``create``, ``delete``), status and error (what
#: ``_sort_out``, the dead letters, a replay and a repair read). The rest of each item
#: (index, id, version, result, shards, sequence number, term) is neither sent nor
#: decoded: an item of a successful write is about 25 bytes instead of about 180.
ANSWER_FILTER = "took,errors,items.*.status,items.*.error"

_op_type = itemgetter("_op_type")


@dataclass(frozen=True)
class Answer:
    """The actions of one ``_bulk`` request and what the server answered of them."""

    actions: list[dict[str, Any]]
    #: The answer's items, one per action, in order; None when the answer said no item
    #: failed (``errors: false``): then nothing about them is read.
    items: list[dict[str, Any]] | None
    #: Elasticsearch's time for the request (``took``, ms), read on a clock the node
    #: updates every ``thread_pool.estimated_time_interval`` (200 ms by default): 0 for
    #: most requests shorter than that, whatever they took.
    took: int = 0

    def tally(self) -> tuple[int, int, list[tuple[dict[str, Any], str, dict[str, Any]]]]:
        """(indexed, deleted, failed): the actions written and deleted, and those that
        failed as (action, op, item info). Without failures, counted from the actions'
        ops alone, in one pass; otherwise item by item."""
        if self.items is None:
            deleted = list(map(_op_type, self.actions)).count("delete")
            return len(self.actions) - deleted, deleted, []
        indexed = deleted = 0
        failed: list[tuple[dict[str, Any], str, dict[str, Any]]] = []
        for action, item in zip(self.actions, self.items, strict=True):
            ((op, info),) = item.items()
            if 200 <= int(info.get("status", 500)) < 300:
                if op == "delete":
                    deleted += 1
                else:
                    indexed += 1
            else:
                failed.append((action, op, info))
        return indexed, deleted, failed


def send_halving(
    es: SearchEngine, actions: list[Encoded], refused: list[dict[str, Any]],
    **options: Any,
) -> list[Answer]:
    """One ``_bulk`` request of ``actions`` (``options``: the request's, e.g.
    ``require_alias``), its answer filtered to what is read (``ANSWER_FILTER``): the
    answer of each request sent, in order. The body is the actions' bytes joined,
    nothing serialised again. A request the server refuses as too large is split in
    halves, each sent the same way, until an action that is refused alone: that one
    goes to ``refused``, with no answer. Halving costs a few requests, and only when a
    document is larger than the limit or a batch sums past it."""
    if not actions:
        return []
    try:
        resp = es.bulk(operations=b"".join(body for _action, body in actions),
                       filter_path=ANSWER_FILTER, **options)
    except SearchRefused as exc:
        if not _refused_as_too_large(exc):
            raise
        if len(actions) == 1:
            refused.append(actions[0][0])
            return []
        mid = len(actions) // 2
        return (send_halving(es, actions[:mid], refused, **options)
                + send_halving(es, actions[mid:], refused, **options))
    answered = [action for action, _body in actions]
    took = int(resp.get("took", 0))
    if resp.get("errors", True) is False:
        return [Answer(answered, None, took)]
    items: list[dict[str, Any]] = resp["items"]
    return [Answer(answered, items, took)]


def encoded_chunks(
    actions: Iterable[dict[str, Any]], chunk_size: int, max_chunk_bytes: int
) -> Iterator[list[Encoded]]:
    """``actions`` serialised, in chunks of at most ``chunk_size`` actions and
    ``max_chunk_bytes`` bytes (an action larger than that alone), read as the clients'
    ``streaming_bulk`` helper reads them: the action after a full chunk is taken
    before that chunk is sent."""
    chunk: list[Encoded] = []
    size = 0
    for action in actions:
        body = encode(action)
        if chunk and (len(chunk) >= chunk_size or size + len(body) > max_chunk_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append((action, body))
        size += len(body)
    if chunk:
        yield chunk


def _status(item: dict[str, Any]) -> int:
    ((_op, info),) = item.items()
    return int(info.get("status", 500))


def stream_answers(
    es: SearchEngine,
    actions: Iterable[dict[str, Any]],
    refused: list[dict[str, Any]],
    *,
    chunk_size: int,
    max_chunk_bytes: int,
    max_retries: int = 0,
    initial_backoff: float = 2,
    max_backoff: float = 600,
    **options: Any,
) -> Iterator[Answer]:
    """``actions`` in ``_bulk`` requests of ``encoded_chunks``, as the answer of each
    (``Answer.tally`` sorts it out); a request the server refuses as too large is sent
    again by halves (``send_halving``), the actions no request can carry going to
    ``refused``. Items refused with 429 are sent again up to ``max_retries`` times,
    after a backoff doubling from ``initial_backoff`` up to ``max_backoff`` seconds (as
    the clients' ``streaming_bulk`` does): their answers come after the rest of their
    chunk's."""
    for chunk in encoded_chunks(actions, chunk_size, max_chunk_bytes):
        for attempt in range(max_retries + 1):
            if attempt:
                time.sleep(min(max_backoff, initial_backoff * 2 ** (attempt - 1)))
            again: set[int] = set()
            for answer in send_halving(es, chunk, refused, **options):
                if answer.items is None or attempt == max_retries:
                    yield answer
                    continue
                later = {i for i, item in enumerate(answer.items) if _status(item) == 429}
                if not later:
                    yield answer
                    continue
                again.update(id(answer.actions[i]) for i in later)
                yield Answer([a for i, a in enumerate(answer.actions) if i not in later],
                             [it for i, it in enumerate(answer.items) if i not in later],
                             answer.took)
            if not again:
                break
            chunk = [(action, body) for action, body in chunk if id(action) in again]


def send(
    es: SearchEngine,
    actions: Iterable[dict[str, Any]],
    on_reject: Callable[[Rejected], None],
    *,
    chunk_size: int = CHUNK_ACTIONS,
    max_chunk_bytes: int = CHUNK_BYTES,
    alive: Alive | None = None,
) -> BulkStats:
    """Send ``actions`` in chunks; returns what happened to them (see module docstring).
    ``alive`` lets a conflict against a tombstone restore a node PostgreSQL still has
    (``resolve_conflicts``).

    Raises ``Retryable`` on the first transient per-item failure.
    """
    stats = BulkStats()
    conflicts: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    for answer in stream_answers(
        es, actions, refused, chunk_size=chunk_size, max_chunk_bytes=max_chunk_bytes,
        # Fail (and retry) rather than auto-create a concrete index named like the alias.
        require_alias=True,
    ):
        sort_out(stats, conflicts, answer, on_reject)
        _reject_too_large(stats, refused, on_reject)
    _reject_too_large(stats, refused, on_reject)
    return _settle(es, stats, conflicts, alive)


def _reject_too_large(
    stats: BulkStats, refused: list[dict[str, Any]], on_reject: Callable[[Rejected], None]
) -> None:
    for action in refused:
        stats.rejected += 1
        on_reject(too_large(action))
    refused.clear()


#: Requests one ``send_chunks`` call keeps in flight. Two: the search server indexes a
#: shard's part of a bulk request on one of its write threads (two on two cores), so a
#: second request keeps the other busy while the first is answered and the next one is
#: read and encoded; a third would only queue in the server (bench_dir_rename.py).
IN_FLIGHT = 2


def send_chunks(
    es: SearchEngine,
    chunks: Iterable[list[Encoded]],
    on_reject: Callable[[Rejected], None],
    *,
    in_flight: int | Callable[[], int] = IN_FLIGHT,
    before_request: Callable[[], None] | None = None,
    alive: Alive | None = None,
    timings: dict[str, float] | None = None,
) -> BulkStats:
    """``send`` for chunks already encoded (``encoded_chunks``), with up to ``in_flight``
    ``_bulk`` requests in flight at once (a number, or a function asked before each
    request: at most ``IN_FLIGHT``), each on a thread (and a connection) of its own;
    ``before_request`` is called in the caller's thread before each request is sent (a
    pause for more urgent requests, a check that may raise to give up). Answers are
    sorted out in the caller's thread in the order of the chunks, as ``send`` does: the
    same counts, dead letters and conflicts, and ``Retryable`` on the first transient
    item. Elasticsearch's own time (``took``, summed) and the requests sent go to
    ``timings["es_took"]`` and ``timings["requests"]``.

    Why the requests may be applied in any order: every action carries its external
    version (``version_type=external``: an event's position), and the server keeps the
    write with the highest version whatever order writes arrive in (``indexer.applier``
    has the argument); two requests of one call are no different from the two lanes, or
    two workers, writing side by side. The call returns only once every request it sent
    was answered, so a caller that moves a checkpoint after it never passes a write not
    yet acknowledged; on any error it first waits for the requests in flight to end,
    then raises (the caller applies the whole work again: idempotent, the writes already
    made answer 409)."""
    stats = BulkStats()
    conflicts: list[dict[str, Any]] = []
    took = 0
    requests = 0
    pending: deque[tuple[Future[list[Answer]], list[dict[str, Any]]]] = deque()

    def settle_oldest() -> None:
        nonlocal took
        future, refused = pending.popleft()
        for answer in future.result():
            took += answer.took
            sort_out(stats, conflicts, answer, on_reject)
        _reject_too_large(stats, refused, on_reject)

    threads = IN_FLIGHT if callable(in_flight) else max(1, in_flight)

    def limit() -> int:
        return max(1, min(threads, in_flight() if callable(in_flight) else in_flight))

    # Leaving the pool waits for its threads, whatever ended the loop: no request of
    # this call outlives it.
    with ThreadPoolExecutor(threads, thread_name_prefix="bulk") as pool:
        for chunk in chunks:
            if before_request is not None:
                before_request()
            while len(pending) >= limit():  # asked last: how many may be in flight now
                settle_oldest()
            refused: list[dict[str, Any]] = []
            pending.append((pool.submit(send_halving, es, chunk, refused,
                                        require_alias=True), refused))
            requests += 1
        while pending:
            settle_oldest()
    if timings is not None:
        timings["es_took"] = took / 1000
        timings["requests"] = requests
    return _settle(es, stats, conflicts, alive)


def send_stream(
    es: SearchEngine,
    actions: Iterable[dict[str, Any]],
    on_reject: Callable[[Rejected], None],
    *,
    chunk_size: int,
    max_chunk_bytes: int,
    in_flight: int | Callable[[], int] = IN_FLIGHT,
    before_request: Callable[[], None] | None = None,
    alive: Alive | None = None,
    timings: dict[str, float] | None = None,
) -> BulkStats:
    """``send_chunks`` for a stream of actions not yet read: they are read, built and
    encoded into chunks (``encoded_chunks``) on a thread of their own (``prefetched``:
    the next requests are ready while these are in flight), so reading PostgreSQL,
    encoding and up to ``in_flight`` requests overlap. Whatever ends the sending, that
    thread has stopped when this returns (it is the only user of what ``actions`` reads
    from until then): the caller may then close ``actions``, its cursor and snapshot.
    Used by a subtree pass and by a node-lane batch too large to read whole (an
    import's)."""
    chunks = prefetched(encoded_chunks(actions, chunk_size, max_chunk_bytes), 1)
    try:
        return send_chunks(es, chunks, on_reject, in_flight=in_flight,
                           before_request=before_request, alive=alive, timings=timings)
    finally:
        chunks.close()


def send_request(
    es: SearchEngine,
    actions: list[dict[str, Any]],
    on_reject: Callable[[Rejected], None],
    timings: dict[str, float] | None = None,
    alive: Alive | None = None,
) -> BulkStats:
    """``send`` for actions that fit one request (the node lane's batches): one
    ``_bulk`` call, no helper generators in between, and Elasticsearch's own time for
    it (``took``) in ``timings["es_took"]`` (against the wall time, that tells queueing
    in the server and the client from the work itself, on a node whose ``took`` clock
    is read each time: see ``Answer.took``)."""
    stats = BulkStats()
    conflicts: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    answers = send_halving(es, [(a, encode(a)) for a in actions], refused,
                           require_alias=True)
    if timings is not None:
        timings["es_took"] = sum(answer.took for answer in answers) / 1000
    for answer in answers:
        sort_out(stats, conflicts, answer, on_reject)
    _reject_too_large(stats, refused, on_reject)
    return _settle(es, stats, conflicts, alive)


def sort_out(
    stats: BulkStats, conflicts: list[dict[str, Any]], answer: Answer,
    on_reject: Callable[[Rejected], None],
) -> None:
    """Count the answer of one request into ``stats`` (see the module docstring): the
    actions written and deleted, conflicts to ``conflicts``, rejections to
    ``on_reject``; raise ``Retryable`` on the first transient failure."""
    indexed, deleted, failed = answer.tally()
    stats.indexed += indexed
    stats.deleted += deleted
    for action, op, info in failed:
        _sort_out(stats, conflicts, action, op, info, on_reject)


def _sort_out(
    stats: BulkStats, conflicts: list[dict[str, Any]], action: dict[str, Any], op: str,
    info: dict[str, Any], on_reject: Callable[[Rejected], None],
) -> None:
    """Count one failed item (see the module docstring); raise ``Retryable`` if
    transient."""
    status = int(info.get("status", 500))
    if status == 409:
        conflicts.append(action)
    elif op == "delete" and status == 404 and "error" not in info:
        stats.deleted += 1
    elif status == 429 or status >= 500 or (
        isinstance(info.get("error"), dict)
        and info["error"].get("type") == "index_not_found_exception"
    ):
        # Stop at once: the rest of the batch is sent again on the retry anyway.
        raise Retryable(f"Elasticsearch refused part of a batch: {status} {_error_text(info)}")
    else:
        stats.rejected += 1
        on_reject(
            Rejected(
                namespace=str(action.get("routing", "")),
                node_id=str(action["_id"]),
                version=int(action["version"]),
                status=status,
                error=_error_text(info),
                document=source_of(action),
            )
        )


def _settle(
    es: SearchEngine, stats: BulkStats, conflicts: list[dict[str, Any]], alive: Alive | None
) -> BulkStats:
    replaced = resolve_conflicts(es, conflicts, alive=alive)
    stats.overridden += sum(replaced)
    stats.already_newer += len(replaced) - sum(replaced)
    return stats


CAS_ATTEMPTS = 5


def resolve_conflicts(
    es: SearchEngine,
    actions: Iterable[dict[str, Any]],
    newest_legit: int | None = None,
    *,
    alive: Alive | None = None,
) -> list[bool]:
    """Settle actions Elasticsearch refused with a version conflict; for each, whether
    it replaced the stored document (False: a write at least as new is there).

    The indexer writes every document at external version = the ``seq`` it stores, so
    a conflict normally means a write at least as new is there. A document changed
    outside the indexer breaks that: the update API raises its version by one, a
    hand-made external version can be anything, and such a document would refuse
    every later legitimate write while search shows the edit. The stored ``seq`` is
    what the document reflects: when it is older than the action's version, the
    action replaces the document by compare-and-swap on its sequence number, which
    fails if anything wrote it after we read it (then it is read and judged again),
    so a newer legitimate write is never overwritten. ``newest_legit`` (a log
    position read after the conflict) also unmasks a ``seq`` no event has reached.
    The replaced document keeps a version above its ``seq``, so its later writes
    come here too: slower, but right.

    An index action refused with nothing there met a tombstone at least as new as
    itself: a real delete's, or one a delete by hand left (one version above the
    document's, so it refuses a rewrite at the same position). A tombstone stores
    nothing to judge it by, so ``alive`` decides (without it, the tombstone wins):
    ``_restore_deleted``.
    """
    replaced: list[bool] = []
    pending = list(actions)
    for start in range(0, len(pending), CHUNK_ACTIONS):
        chunk = pending[start:start + CHUNK_ACTIONS]
        # One realtime mget sorts out the usual case (a re-applied batch) cheaply.
        docs = es.mget(
            [{"_index": a["_index"], "_id": a["_id"], "routing": a["routing"]}
                  for a in chunk],
            source_includes=["seq"], realtime=True,
        )["docs"]
        for action, doc in zip(chunk, docs, strict=True):
            absent = doc is None or not doc.get("found")
            restorable = absent and alive is not None and action["_op_type"] != "delete"
            judged_older = restorable or not _is_newer(doc, int(action["version"]),
                                                       newest_legit)
            replaced.append(judged_older and _compare_and_swap(es, action, newest_legit, alive))
    return replaced


def _is_newer(doc: dict[str, Any] | None, version: int, newest_legit: int | None) -> bool:
    """Whether a stored document is at least as new as a write at ``version``, by the
    ``seq`` it reflects: a later seq, or the same seq as written by the indexer
    (version = seq; an edit since then raised the version). Not found: gone, behind
    a tombstone (``_restore_deleted`` judges those when it can)."""
    if doc is None or not doc.get("found"):
        return True
    stored = (doc.get("_source") or {}).get("seq")
    return supersedes(stored, doc.get("_version"), version, newest_legit)


def _document(action: dict[str, Any]) -> dict[str, Any]:
    """The document of an index action (``contract.source_of``)."""
    document = source_of(action)
    if document is None:
        raise ValueError(f"action on {action['_id']} writes no document")
    return document


def _compare_and_swap(
    es: SearchEngine, action: dict[str, Any], newest_legit: int | None,
    alive: Alive | None = None,
) -> bool:
    """Replace the document ``action`` is about, unless a newer one turns up first;
    whether it was replaced."""
    where = {"index": action["_index"], "id": action["_id"], "routing": action["routing"]}
    for _ in range(CAS_ATTEMPTS):
        try:
            got = es.get(**where, source_includes=["seq"], realtime=True)
        except SearchNotFound:
            if alive is None or action["_op_type"] == "delete":
                return False
            restored = _restore_deleted(es, action, where, alive)
            if restored is None:
                continue  # a document appeared meanwhile: judge it
            return restored
        if _is_newer({**got, "found": True}, int(action["version"]), newest_legit):
            return False
        cas = {"if_seq_no": got["_seq_no"], "if_primary_term": got["_primary_term"]}
        try:
            if action["_op_type"] == "delete":
                es.delete(**where, **cas)
            else:
                es.index(**where, document=_document(action), **cas)
        except (SearchConflict, SearchNotFound):
            continue  # written or deleted since we read it: judge it again
        return True
    raise Retryable(f"document {action['_id']} kept changing while being replaced")


def _restore_deleted(
    es: SearchEngine, action: dict[str, Any], where: dict[str, Any], alive: Alive
) -> bool | None:
    """Write back the document of an index action that a tombstone refused, if the
    tombstone is not a real delete's; whether it was written (None: a document
    appeared meanwhile, judge that instead).

    Why PostgreSQL can tell: a real delete is written only after the node's deletion
    committed (the worker deletes what its snapshot no longer has, a sweep or repair
    what PostgreSQL no longer knows), and a deleted node never comes back (ids are
    never reused). So a node that exists after the document was found absent has no
    real delete in the index yet, and the tombstone is a hand delete's. The write is a
    ``create`` (internal versioning: it succeeds over a tombstone, and fails if a
    document appeared), and the node is looked up once more after it: deleted
    meanwhile, its real delete may have come before our write, so ours is taken back
    by compare-and-swap (which leaves alone anything written after it)."""
    namespace, node_id = str(action["routing"]), str(action["_id"])
    if not alive(namespace, node_id):
        return False  # deleted for real: the tombstone is (or will be) its delete
    try:
        created = es.index(**where, document=_document(action), op_type="create")
    except SearchConflict:
        return None
    if alive(namespace, node_id):
        return True
    try:
        es.delete(**where, if_seq_no=created["_seq_no"],
                  if_primary_term=created["_primary_term"])
    except (SearchConflict, SearchNotFound):
        pass  # written or deleted after our create: that write is the newer one
    return False
