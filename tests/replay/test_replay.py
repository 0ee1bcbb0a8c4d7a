"""Replay and reindex build an index equal to the live one, swap it in with no gap and
no empty search, and ``--until`` reproduces a past state."""

from __future__ import annotations

import json
import threading
from contextlib import closing
from typing import Any

import pytest
from click.testing import CliRunner
from tree_checks import writer_holding_its_block

from coordinator import Coordinator
from indexer import elasticsearch_index, replay_sources, setfold
from indexer.errors import ReplayError
from indexer.log_scan import current_bound
from indexer.progress import Progress
from indexer.replay import rebuild
from indexer.replay_lease import ReplayBusy, ReplayLease
from indexer.search_client import open_search
from indexer.search_engine import SearchEngine
from indexer.verify import verify_index, verify_log
from pathkeeper.cli.main import main

from .conftest import RunningWorker, diff_summary, expected_index, index_docs
from .replay_workload import concurrent_ops, random_ops


def test_replay_and_reindex_equal_the_live_index(
    coord: Coordinator, database_url: str, es_url: str, es: SearchEngine, alias: str,
    live_worker: RunningWorker,
) -> None:
    for ns in ("a", "b"):
        coord.create_namespace(ns)
    assert concurrent_ops(coord, ["a", "b"], clients=4, ops_each=40, seed=11) > 80
    live_worker.caught_up(coord)
    live_index = elasticsearch_index.alias_targets(es, alias)
    live, expected = index_docs(es, alias), expected_index(coord)
    assert live == expected, diff_summary(live, expected)
    # Not an empty comparison. How much survives depends on how the clients' recursive
    # deletes interleaved with their creates (27 in one run), so no more than that.
    assert len(live) > 10

    result = rebuild(coord, es, source="events", alias=alias, keep_old=True)
    assert result.swapped and result.old_indices == live_index
    assert elasticsearch_index.alias_targets(es, alias) == [result.index]
    assert result.documents == len(live)
    assert index_docs(es, result.index) == live  # doc for doc, every field but seq
    assert index_docs(es, live_index[0]) == live  # the old one is kept (--keep-old)

    again = rebuild(coord, es, source="snapshot", alias=alias)
    assert again.swapped and again.deleted == [result.index]
    assert not es.index_exists(result.index)
    assert index_docs(es, alias) == live

    report = verify_index(coord, es, alias=alias)
    assert report.ok and report.compared == len(live), report.drift
    assert verify_log(coord).ok

    env = {"PATHKEEPER_DATABASE_URL": database_url, "PATHKEEPER_ES_URL": es_url}
    for command in ("replay", "reindex"):
        out = CliRunner().invoke(main, [command, "--alias", alias, "--dry-run", "-q"], env=env)
        assert out.exit_code == 0, out.output
        assert f"would write {len(live)} documents" in out.output
    # a dry run changes nothing
    assert elasticsearch_index.alias_targets(es, alias) == [again.index]


def test_swap_under_load_loses_nothing_and_search_never_comes_back_empty(
    coord: Coordinator, es_url: str, es: SearchEngine, alias: str,
    live_worker: RunningWorker,
) -> None:
    coord.create_namespace("stable")
    coord.mkdir("stable", "/keep")
    needle = coord.create_file("stable", "/keep/needle.txt", "find me")
    for seed, ns in enumerate(("w1", "w2")):
        coord.create_namespace(ns)
        random_ops(coord, ns, 40, seed=seed)
    live_worker.caught_up(coord)

    stop, swapped, seen_after_swap = threading.Event(), threading.Event(), threading.Event()
    searches: list[int] = []
    misses: list[list[str]] = []

    def hammer() -> None:
        query = {"bool": {"filter": [{"term": {"namespace": "stable"}},
                                     {"term": {"path": "/keep/needle.txt"}}]}}
        after = 0
        client = open_search(es_url)
        with closing(client):
            while not stop.is_set():
                was_swapped = swapped.is_set()
                hits = client.search(alias, {"query": query})["hits"]["hits"]
                searches.append(1)
                if [h["_id"] for h in hits] != [needle.node.id]:
                    misses.append([h["_id"] for h in hits])
                if was_swapped:
                    after += 1
                    if after == 20:
                        seen_after_swap.set()

    stop_writing = threading.Event()
    writer_errors: list[BaseException] = []

    def writers() -> None:
        # Keep writing until told to stop: the rebuild always runs under load.
        rounds = 0
        try:
            while not stop_writing.is_set() or rounds < 2:
                concurrent_ops(coord, ["w1", "w2"], clients=2, ops_each=5, seed=100 + rounds)
                rounds += 1
        except BaseException as exc:  # reported by the test thread
            writer_errors.append(exc)

    searcher, writer = threading.Thread(target=hammer), threading.Thread(target=writers)
    searcher.start()
    writer.start()
    try:
        result = rebuild(coord, es, source="events", alias=alias)
        assert result.swapped and writer.is_alive(), writer_errors
        assert result.final_position > result.position  # the log moved on meanwhile
        swapped.set()
        # The searcher ran across the swap: it keeps going until it searched after it.
        assert seen_after_swap.wait(60)
    finally:
        stop_writing.set()
        writer.join(120)
        stop.set()
        searcher.join(60)
    assert len(searches) > 20 and not misses, f"{len(misses)} of {len(searches)} missed"
    assert not writer_errors, writer_errors
    live_worker.caught_up(coord)
    actual, expected = index_docs(es, alias), expected_index(coord)
    assert actual == expected, diff_summary(actual, expected)


def test_until_rebuilds_a_past_state_beside_the_live_index(
    coord: Coordinator, es: SearchEngine, alias: str, live_worker: RunningWorker
) -> None:
    coord.create_namespace("p")
    random_ops(coord, "p", 60, seed=3)
    past = live_worker.caught_up(coord)
    captured = index_docs(es, alias)
    random_ops(coord, "p", 40, seed=4)
    coord.create_namespace("later")
    coord.create_file("later", "/x", "new")
    live_worker.caught_up(coord)
    live_index = elasticsearch_index.alias_targets(es, alias)
    assert index_docs(es, alias) != captured

    result = rebuild(coord, es, source="events", alias=alias, until=past)
    assert not result.swapped and result.position == past
    assert elasticsearch_index.alias_targets(es, alias) == live_index  # not swapped in
    assert index_docs(es, result.index) == captured
    # Not mistaken for an abandoned build by the next rebuild.
    nxt = rebuild(coord, es, source="events", alias=alias)
    assert result.index not in nxt.cleaned_up and es.index_exists(result.index)
    assert current_bound(coord.engine) >= past


def test_replay_of_an_import_then_renames_folded_in_parts_equals_postgresql(
    coord: Coordinator, es: SearchEngine, alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import-heavy log (an import's event per node, then renames, moves, a directory
    renamed, one deleted, a directory's metadata) replayed with its fold in parts, the
    next part folding while the one before loads: the index equals PostgreSQL."""
    coord.create_namespace("imp")
    lines = [json.dumps({"path": f"/top{t}/dir{d}/file{f}.txt", "kind": "file",
                         "content": f"{t} {d} {f}"})
             for t in range(3) for d in range(4) for f in range(25)]
    coord.import_nodes("imp", lines)
    for d in range(4):
        for f in range(0, 25, 3):
            coord.rename("imp", f"/top0/dir{d}/file{f}.txt", f"renamed{f}.txt")
    coord.move("imp", "/top1/dir0/file1.txt", "/top2/dir3/moved.txt")
    coord.rename("imp", "/top1/dir2", "dir2b")  # every descendant's path changes
    coord.delete("imp", "/top2/dir1", recursive=True)
    coord.set_metadata("imp", "/top1", {"owner": "ops"})
    calls: list[setfold.FoldPart | None] = []
    fold = setfold.fold

    def recorded(*args: Any, **kwargs: Any) -> setfold.SetFold:
        calls.append(kwargs.get("part"))
        return fold(*args, **kwargs)

    monkeypatch.setattr(setfold, "fold", recorded)
    monkeypatch.setattr(replay_sources, "fold_parts", lambda engine: 3)
    progress = Progress(enabled=False)
    result = rebuild(coord, es, source="events", alias=alias, progress=progress)
    assert calls == [setfold.FoldPart(i, 3) for i in range(3)]
    # The parts folded during the load are not counted as loaded documents.
    assert progress.summary.counts["documents"] == result.documents
    expected = expected_index(coord)
    assert len(expected) > 250  # 300 files and their directories, less one deleted
    assert result.swapped and result.documents == len(expected)
    got = index_docs(es, alias)
    assert got == expected, diff_summary(got, expected)
    assert verify_index(coord, es, alias=alias).ok


def test_a_dry_run_of_replay_counts_in_postgresql(
    coord: Coordinator, es: SearchEngine, alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dry run's count is the fold's own (roots left out, as the index leaves them),
    counted by PostgreSQL: no folded node is streamed into Python."""
    for ns in ("a", "b"):
        coord.create_namespace(ns)
        random_ops(coord, ns, 30, seed=5)
    coord.create_namespace("empty")
    expected = expected_index(coord)

    def streamed(self: setfold.FoldedNamespace) -> Any:
        raise AssertionError("a dry run streamed the folded nodes")

    monkeypatch.setattr(setfold.FoldedNamespace, "nodes", streamed)
    result = rebuild(coord, es, source="events", alias=alias, dry_run=True)
    assert result.dry_run and result.documents == len(expected) > 10
    assert rebuild(coord, es, source="events", alias=alias, dry_run=True,
                   namespaces=["a"]).documents == sum(
        1 for d in expected.values() if d["namespace"] == "a")


def test_a_second_rebuild_of_the_same_alias_is_refused(
    coord: Coordinator, es: SearchEngine, alias: str
) -> None:
    with ReplayLease(coord.engine, alias):
        try:
            rebuild(coord, es, alias=alias)
        except ReplayBusy as exc:
            assert alias in str(exc) and "another replay or reindex" in str(exc)
        else:
            raise AssertionError("the second rebuild was not refused")
        with ReplayLease(coord.engine, alias + "-other"):
            pass  # another alias is independent
    with ReplayLease(coord.engine, alias):
        pass  # released


def test_replay_that_times_out_names_the_transaction_it_waited_for(
    coord: Coordinator, es: SearchEngine, alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer holds a block of positions open: replay cannot pick a safe bound, and its
    error says whom it waited for, so that the operator can act."""
    coord.create_namespace("t")
    coord.mkdir("t", "/before")
    monkeypatch.setattr("indexer.log_scan.BOUND_WAIT", 1.0)
    with writer_holding_its_block(coord, "t", "/open") as pid:
        with pytest.raises(ReplayError) as err:
            current_bound(coord.engine, wait=0.5)
        assert f"pid {pid}" in str(err.value), str(err.value)
        assert str(coord.engine.url.database) in str(err.value)
        with pytest.raises(ReplayError) as err:
            rebuild(coord, es, source="events", alias=alias)
        assert f"pid {pid}" in str(err.value), str(err.value)
    assert current_bound(coord.engine, wait=5.0) > 0  # released: the bound moves again
