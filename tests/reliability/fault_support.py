"""Helpers for the fault tests (``test_faults.py``): a worker thread whose death is
reported, client threads that record a history, the end-of-run checks, and a proxy
that makes Elasticsearch answer errors. (The search server and the per-test alias are
the session fixtures of ``tests/conftest.py``.)

The indexer tests' helpers (``tests/indexer/indexer_support.py``: workers as threads or
processes, the index-equals-PostgreSQL check) are reused, not copied: that directory
is not a package (a package named ``indexer`` there would shadow the real one), so it
is put on ``sys.path``, at the end so that it shadows nothing.
"""

from __future__ import annotations

import json
import random
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import text

from coordinator import Coordinator
from coordinator.errors import CoordinatorError, Unavailable
from indexer.worker import Worker

from .dbcheck import fold_log, setfold_rows, table_rows, tree_violations
from .history_check import Call, Ev, Report, check_history
from .history_client import describe, random_call

_INDEXER_TESTS = str(Path(__file__).resolve().parents[1] / "indexer")
if _INDEXER_TESTS not in sys.path:
    sys.path.append(_INDEXER_TESTS)

import indexer_support  # noqa: E402

__all__ = ["indexer_support"]


@contextmanager
def worker_thread(database_url: str, es_url: str, alias: str, **options: Any) -> Iterator[Worker]:
    """``indexer_support.running_worker``, polling faster (the point of the fault tests is
    that the worker must not die; it reports its traceback if it does)."""
    options.setdefault("poll_interval", 0.2)
    with indexer_support.running_worker(database_url, es_url, alias, **options) as worker:
        yield worker


worker_alive = indexer_support.worker_alive


# ---------------------------------------------------------------- client threads


class ThreadClient:
    """One client thread of a history: ``history_client``'s random operations on the
    shared ``Coordinator``, each call recorded as a ``history_check.Call`` with the
    monotonic time it returned (``returned``)."""

    def __init__(self, coord: Coordinator, ns: str, seed: int, stop: threading.Event) -> None:
        self.coord = coord
        self.ns = ns
        self.rng = random.Random(seed)
        self.stop = stop
        self.name = f"t{seed}"
        self.calls: list[Call] = []
        self.returned: list[float] = []
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def _run(self) -> None:
        ids: list[str] = []
        n = 0
        while not self.stop.is_set():
            op, args, kwargs = random_call(self.rng, ids)
            call = Call(self.name, n, op, args, kwargs)
            rec: dict[str, Any] = {"ret": n}
            try:
                result = getattr(self.coord, op)(self.ns, *args, **kwargs)
                rec.update(ok=True, **describe(result))
                if "id" in rec:
                    ids.append(rec["id"])
                    del ids[:-20]
            except CoordinatorError as exc:
                rec.update(ok=False, err=type(exc).__name__, msg=str(exc)[:200])
            except Exception as exc:  # a raw driver error: a violation (history_check)
                rec.update(ok=False, crash=repr(exc)[:500])
            call.ret = rec
            self.calls.append(call)
            self.returned.append(time.monotonic())
            n += 1
            if rec.get("err") == Unavailable.__name__:
                # Pacing while the database is down (refused connections return at
                # once), not a synchronisation.
                self.stop.wait(0.02)


# ---------------------------------------------------------------- checks


def events_of(coord: Coordinator, ns: str) -> list[Ev]:
    """Every event of ``ns`` in position order, straight from the table."""
    with coord.engine.connect() as conn:
        return [
            Ev(int(r.position), r.type, str(r.node_id) if r.node_id else None, r.payload)
            for r in conn.execute(
                text("SELECT position, type, node_id, payload FROM events "
                     "WHERE namespace = :ns ORDER BY position"),
                {"ns": ns},
            )
        ]


def check_run(
    coord: Coordinator, ns: str, calls: list[Call], setup_seqs: list[int]
) -> Report:
    """The end-of-history checks of ``test_histories`` on one namespace: the history is
    explained by the log (nothing acknowledged lost, nothing unexplained, no untyped
    error), the tree is valid, and both folds of the log read through ``read_events``
    reproduce the ``nodes`` table. Violations and counters in the report."""
    events = events_of(coord, ns)
    report = check_history(calls, events, setup_seqs)
    report.violations += tree_violations(coord.engine, ns)
    fold, _read = fold_log(coord, [ns], strict_paths=False)
    if fold.applied != len(events):
        report.violations.append(f"read_events gave {fold.applied} of {len(events)} events")
    table = table_rows(coord.engine, ns)
    if fold.trees[ns].rows() != table:
        report.violations.append("the folded event log differs from the nodes table")
    if setfold_rows(coord.engine, ns) != table:
        report.violations.append("setfold of the event log differs from the nodes table")
    report.counters["stale_payload_paths"] = len(fold.stale_paths)
    report.counters["nodes_at_end"] = len(fold.trees[ns].nodes)
    return report


# ---------------------------------------------------------------- Elasticsearch errors


class ErrorProxy:
    """A TCP relay in front of a search server that, while ``failing`` is set, answers
    every HTTP request itself with an error instead of forwarding it, cycling through
    ``503``, ``429`` and a connection closed without an answer; and, for ``_bulk``
    requests, sometimes a ``200`` whose items all failed with 429 (Elasticsearch's
    answer when its write queue is full). Setting ``failing`` cuts the connections
    already relayed, so that keep-alive connections cannot bypass it."""

    def __init__(self, target_url: str) -> None:
        host, port = target_url.split("://", 1)[1].rstrip("/").rsplit(":", 1)
        self.target = (host, int(port))
        self.failing = threading.Event()
        self.answered: dict[str, int] = {}
        self._listener: socket.socket | None = None
        self._relayed: list[socket.socket] = []
        self._lock = threading.Lock()
        self._turns = {True: 0, False: 0}

    def start(self) -> str:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return f"http://127.0.0.1:{listener.getsockname()[1]}"

    def fail(self) -> None:
        self.failing.set()
        self._cut_relayed()

    def recover(self) -> None:
        self.failing.clear()

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._cut_relayed()

    def _cut_relayed(self) -> None:
        with self._lock:
            conns, self._relayed = self._relayed, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        if self.failing.is_set():
            self._answer_errors(client)
            return
        try:
            upstream = socket.create_connection(self.target)
        except OSError:
            client.close()
            return
        with self._lock:
            self._relayed += [client, upstream]
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=indexer_support.TcpProxy._pipe, args=(a, b),
                             daemon=True).start()

    def _answer_errors(self, client: socket.socket) -> None:
        """Answer requests on this connection with errors until it closes."""
        buf = b""
        try:
            while True:
                request, buf = _read_request(client, buf)
                if request is None:
                    return
                line, body = request
                bulk = "/_bulk" in line
                # A turn of its own for bulk requests: with one shared counter, a worker
                # whose retries interleave one bulk with one other request would see its
                # bulks only on even turns and never get the bulk-429 answer.
                with self._lock:
                    self._turns[bulk] += 1
                    turn = self._turns[bulk]
                kind = ("503", "429", "close", "bulk-429")[turn % (4 if bulk else 3)]
                self.answered[kind] = self.answered.get(kind, 0) + 1
                if kind == "close":
                    return
                if kind == "bulk-429":
                    client.sendall(_response(200, _bulk_all_429(body)))
                else:
                    err = {"error": {"type": "es_rejected_execution_exception",
                                     "reason": "injected by the test proxy"},
                           "status": int(kind)}
                    client.sendall(_response(int(kind), err))
        except OSError:
            pass
        finally:
            client.close()


def _read_request(
    sock: socket.socket, buf: bytes
) -> tuple[tuple[str, bytes] | None, bytes]:
    """One HTTP/1.1 request (request line, body) from ``sock``; None at end of stream."""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            return None, buf
        buf += data
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    length = 0
    for h in lines[1:]:
        name, _, value = h.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    while len(buf) < length:
        data = sock.recv(65536)
        if not data:
            return None, buf
        buf += data
    return (lines[0], buf[:length]), buf[length:]


def _response(status: int, body: dict[str, Any]) -> bytes:
    payload = json.dumps(body).encode()
    reason = {200: "OK", 429: "Too Many Requests", 503: "Service Unavailable"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        # The official client refuses a 2xx answer without this header.
        f"X-Elastic-Product: SearchEngine\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


def _bulk_all_429(body: bytes) -> dict[str, Any]:
    """The answer to a ``_bulk`` body in which every action was rejected with 429."""
    items: list[dict[str, Any]] = []
    lines = iter(body.decode("utf-8", "replace").splitlines())
    for line in lines:
        if not line.strip():
            continue
        action = json.loads(line)
        op, meta = next(iter(action.items()))
        if op != "delete":
            next(lines, None)  # its source (or update body) line
        items.append({op: {"_index": meta.get("_index", ""), "_id": meta.get("_id"),
                           "status": 429,
                           "error": {"type": "es_rejected_execution_exception",
                                     "reason": "injected by the test proxy"}}})
    return {"took": 1, "errors": True, "items": items}
