"""A subtree pass streams its subtree from a server-side cursor, on real PostgreSQL and
a real search server. When the sending fails half-way (the search server went away,
say), the stream must be closed before the pass gives up, while its connection is
still open: left to the garbage collector, the cursor could be collected first, still
open (a ResourceWarning, raised in whichever test the collector happens to run)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from indexer_support import (
    SearchServerGone,
    expected_docs,
    index_docs,
    last_position,
    one_chunk_then_gone,
    run_once,
)

import indexer.applier as applier_module
from coordinator import Coordinator
from indexer import bulk
from indexer.applier import Applier, SubtreeWork
from indexer.plan import plan_batch
from indexer.search_engine import SearchEngine


def test_a_subtree_pass_that_fails_while_sending_closes_its_stream_first(
    coord: Coordinator, es: SearchEngine, alias: str, database_url: str, es_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    coord.create_namespace("s")
    coord.mkdir("s", "/a")
    for i in range(6):
        coord.create_file("s", f"/a/f{i}", f"{i}")
    run_once(database_url, es_url, alias, partitions=1)
    before = last_position(coord)
    coord.rename("s", "/a", "b")
    events, _ = coord.read_events(after=before)
    plan = plan_batch(events)
    version = events[-1].position
    app = Applier(coord.engine, es, alias, lambda r: None)
    app.apply_nodes(plan, version)
    work = SubtreeWork.from_plan(plan, after=0, cursor=version, version=version)

    finished: list[str] = []
    real_stream = applier_module.stream_subtree_entries

    def watched_stream(
        *args: Any, **kwargs: Any
    ) -> Generator[tuple[str, int, bytes | None], None, None]:
        try:
            yield from real_stream(*args, **kwargs)
        finally:  # runs once the real stream (and its cursor) was closed
            finished.append("stream closed")

    monkeypatch.setattr(applier_module, "stream_subtree_entries", watched_stream)
    monkeypatch.setattr(bulk, "send_chunks", one_chunk_then_gone())
    try:
        app.apply_subtrees(work, chunk_size=2)
    except SearchServerGone:
        # Checked while the exception (and every frame it holds) is alive: without an
        # explicit close the stream would still be suspended here.
        assert finished == ["stream closed"]
    else:
        pytest.fail("the pass did not fail")

    monkeypatch.undo()
    app.apply_subtrees(work)  # applying the pass again completes it
    want = expected_docs(coord, "s")
    got = {k: {f: v for f, v in d.items() if f != "seq"}
           for k, d in index_docs(es, alias, "s").items()}
    assert got == want
    assert sorted(d["path"] for d in got.values()) == ["/b"] + [f"/b/f{i}" for i in range(6)]
