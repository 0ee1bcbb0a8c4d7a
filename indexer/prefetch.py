"""Reading ahead on a thread of its own while the caller sends what was read: the
bulk loads of replay and the worker's large batches read from PostgreSQL while
Elasticsearch indexes the previous request."""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterator
from typing import TypeVar

#: Batches prepared ahead of the one being consumed.
PREFETCH_CHUNKS = 2

T = TypeVar("T")


def prefetched(
    items: Iterator[T], batch: int, depth: int = PREFETCH_CHUNKS
) -> Generator[T, None, None]:
    """``items``, in order, produced by a thread of their own up to ``depth`` batches
    ahead: reading from PostgreSQL and building documents overlaps the search server
    indexing the previous bulk request, instead of adding to it. Memory: at most
    ``depth + 2`` batches. An error in ``items`` is raised here; closing this generator
    (the caller must, e.g. in a ``finally``) stops the thread, closes ``items`` in it and
    waits for it, so the caller may then close what ``items`` reads from."""
    handoff: queue.Queue[tuple[list[T], BaseException | None]] = queue.Queue(depth)
    stop = threading.Event()

    def put(buf: list[T], exc: BaseException | None = None) -> bool:
        while not stop.is_set():
            try:
                handoff.put((buf, exc), timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        buf: list[T] = []
        try:
            for item in items:
                buf.append(item)
                if len(buf) >= batch:
                    if not put(buf):
                        return
                    buf = []
            if buf:
                put(buf)
            put([])  # an empty batch: the end
        except BaseException as exc:
            put([], exc)
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="prefetch", daemon=True)
    thread.start()
    try:
        while True:
            buf, exc = handoff.get()
            if exc is not None:
                raise exc
            if not buf:
                return
            yield from buf
    finally:
        stop.set()
        thread.join()
