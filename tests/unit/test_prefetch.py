"""``indexer.prefetch.prefetched``: a source read ahead in a thread, in order."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from indexer.prefetch import prefetched


def test_prefetched_keeps_order_raises_errors_and_stops_its_thread_when_closed() -> None:
    assert list(prefetched(iter(range(10)), batch=3)) == list(range(10))
    assert list(prefetched(iter([]), batch=3)) == []

    def failing() -> Iterator[int]:
        yield 1
        raise RuntimeError("fold broke")

    got: list[int] = []
    with pytest.raises(RuntimeError, match="fold broke"):
        for x in prefetched(failing(), batch=1):
            got.append(x)
    assert got == [1]

    closed = threading.Event()

    def endless() -> Iterator[int]:
        try:
            n = 0
            while True:
                n += 1
                yield n
        finally:
            closed.set()

    docs = prefetched(endless(), batch=2, depth=1)
    assert [next(docs) for _ in range(5)] == [1, 2, 3, 4, 5]
    docs.close()  # returns once the thread has stopped and closed its source
    assert closed.is_set()
    assert not any(t.name == "prefetch" for t in threading.enumerate())
