"""A replay killed with kill -9 leaves the live alias alone and is cleaned up by the
next run; verify finds each kind of planted drift and --repair fixes exactly those."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from prometheus_client import REGISTRY

from coordinator import Coordinator
from coordinator.indexing import consumer_for, wait_indexed
from indexer import elasticsearch_index
from indexer.bulk import send
from indexer.contract import building_marker, index_action
from indexer.index_scan import stream_index_docs
from indexer.replay import rebuild, rebuild_namespaces
from indexer.replay_lease import ReplayBusy
from indexer.search_engine import SearchEngine
from indexer.verify import Drift, scheduled_verify, verify_index
from pathkeeper.cli.main import main

from .conftest import RunningWorker, diff_summary, expected_index, index_docs
from .replay_workload import random_ops

HERE = Path(__file__).parent


def test_kill_9_midway_leaves_the_alias_alone_and_a_rerun_succeeds(
    coord: Coordinator, database_url: str, es_url: str, es: SearchEngine, alias: str,
    live_worker: RunningWorker,
) -> None:
    coord.create_namespace("k")
    random_ops(coord, "k", 50, seed=21)
    live_worker.caught_up(coord)
    live_index = elasticsearch_index.alias_targets(es, alias)
    live = index_docs(es, alias)
    with subprocess.Popen(
        [sys.executable, str(HERE / "paused_replay.py"), database_url, es_url, alias],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith("LOADED "), line
            half_built = line.split()[1]
            # While it runs, it holds the lease: a second rebuild is refused.
            try:
                rebuild(coord, es, alias=alias)
                raise AssertionError("a concurrent rebuild was not refused")
            except ReplayBusy:
                pass
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    assert elasticsearch_index.alias_targets(es, alias) == live_index
    assert index_docs(es, alias) == live
    assert half_built in es.get_alias(building_marker(alias))

    coord.create_file("k", "/after-the-crash", "x")
    result = rebuild(coord, es, alias=alias)
    assert result.cleaned_up == [half_built] and not es.index_exists(half_built)
    assert result.swapped and result.index != half_built
    live_worker.caught_up(coord)
    actual, expected = index_docs(es, alias), expected_index(coord)
    assert actual == expected, diff_summary(actual, expected)


def _plant(es: SearchEngine, alias: str, doc: dict[str, Any], **changes: Any) -> None:
    body = {**doc, **changes}
    es.index(index=alias, id=doc["node_id"], routing=doc["namespace"], document=body,
             version=int(doc["seq"]) + 1, version_type="external", refresh=True)


def test_verify_finds_planted_drift_and_repair_fixes_exactly_it(
    coord: Coordinator, database_url: str, es_url: str, es: SearchEngine, alias: str,
    live_worker: RunningWorker,
) -> None:
    coord.create_namespace("v")
    coord.create_namespace("other")
    random_ops(coord, "v", 40, seed=31)
    files = [coord.create_file("v", f"/plant{i}", f"content {i}").node for i in range(3)]
    live_worker.caught_up(coord)
    es.refresh(alias)
    docs = {d["node_id"]: d for d in stream_index_docs(es, alias)}
    settle = lambda pos: wait_indexed(  # noqa: E731
        coord.engine, pos, 30, consumer_for(alias)
    )
    assert verify_index(coord, es, alias=alias, settle=settle).ok

    missing, wrong_path, stale = files
    extra = str(uuid.uuid4())
    es.delete(index=alias, id=missing.id, routing="v", refresh=True)
    es.index(index=alias, id=extra, routing="v", version=1, version_type="external",
             refresh=True, document={**docs[stale.id], "node_id": extra, "path": "/ghost",
                                     "name": "ghost"})
    _plant(es, alias, docs[wrong_path.id], path="/somewhere/else")
    _plant(es, alias, docs[stale.id], content="an old version")
    coord.mkdir("other", "/tick")  # the log moves on (so a repair's version is newer)
    live_worker.caught_up(coord)

    env = {"PATHKEEPER_DATABASE_URL": database_url, "PATHKEEPER_ES_URL": es_url}
    found = CliRunner().invoke(main, ["verify", "--alias", alias, "-q"], env=env)
    assert found.exit_code == 1, found.output
    for kind, node_id in (("missing", missing.id), ("extra", extra),
                          ("differs", wrong_path.id), ("differs", stale.id)):
        assert f"{kind} v {node_id}" in found.output, found.output

    report = verify_index(coord, es, alias=alias, settle=settle)
    assert set(report.drift) == {
        Drift("missing", "v", missing.id), Drift("extra", "v", extra),
        Drift("differs", "v", wrong_path.id, ("path",)),
        Drift("differs", "v", stale.id, ("content",)),
    }
    # The worker's scheduled job publishes the same count.
    assert scheduled_verify(coord, es, alias, settle) == 4
    assert REGISTRY.get_sample_value("pathkeeper_verify_drift") == 4
    es.refresh(alias)
    before = {d["node_id"]: d for d in stream_index_docs(es, alias)}
    fixed = CliRunner().invoke(main, ["verify", "--alias", alias, "--repair", "-q"], env=env)
    assert fixed.exit_code == 0, fixed.output
    assert "repaired 4" in fixed.output
    es.refresh(alias)
    after = {d["node_id"]: d for d in stream_index_docs(es, alias)}
    drifted = {missing.id, extra, wrong_path.id, stale.id}
    # Exactly those were rewritten: every other document is byte for byte the same.
    assert {k: v for k, v in before.items() if k not in drifted} == {
        k: v for k, v in after.items() if k not in drifted
    }
    assert index_docs(es, alias) == expected_index(coord)
    clean = CliRunner().invoke(main, ["verify", "--alias", alias, "-q"], env=env)
    assert clean.exit_code == 0, clean.output
    assert scheduled_verify(coord, es, alias, settle) == 0
    assert REGISTRY.get_sample_value("pathkeeper_verify_drift") == 0


def test_namespace_replay_rewrites_only_that_namespace_in_place(
    coord: Coordinator, es: SearchEngine, alias: str, live_worker: RunningWorker
) -> None:
    for ns in ("n1", "n2"):
        coord.create_namespace(ns)
        random_ops(coord, ns, 30, seed=len(ns) * 7 + int(ns[1]))
        coord.create_file(ns, "/known", "k")
    live_worker.caught_up(coord)
    es.refresh(alias)
    docs = {d["path"] + d["namespace"]: d for d in stream_index_docs(es, alias)}
    for ns in ("n1", "n2"):
        _plant(es, alias, docs["/known" + ns], content="wrong")
    coord.mkdir("n1", "/tick")
    live_worker.caught_up(coord)
    index_before = elasticsearch_index.alias_targets(es, alias)

    result = rebuild_namespaces(coord, es, ["n1"], alias=alias)
    assert not result.swapped and elasticsearch_index.alias_targets(es, alias) == index_before
    report = verify_index(coord, es, alias=alias)
    assert [(d.namespace, d.fields) for d in report.drift] == [("n2", ("content",))]


def _doc(es: SearchEngine, alias: str, ns: str, node_id: str) -> dict[str, Any]:
    return dict(es.get(index=alias, id=node_id, routing=ns, realtime=True)["_source"])


def test_repair_restores_documents_edited_by_hand_whatever_their_version(
    coord: Coordinator, database_url: str, es_url: str, es: SearchEngine, alias: str,
    live_worker: RunningWorker,
) -> None:
    """A hand edit through the update API (version + 1, right after a replay: no
    later write to move the bound) and a write with a made-up huge external version
    are both repaired at once, and later legitimate changes reach search."""
    coord.create_namespace("h")
    updated = coord.create_file("h", "/updated", "original").node
    huge = coord.create_file("h", "/huge", "original").node
    live_worker.caught_up(coord)
    rebuild(coord, es, source="snapshot", alias=alias)  # every doc at the same bound
    es.update(index=alias, id=updated.id, routing="h", doc={"content": "edited by hand"},
              refresh=True)
    es.index(index=alias, id=huge.id, routing="h", version=10**15, version_type="external",
             document={**_doc(es, alias, "h", huge.id), "content": "tampered"}, refresh=True)
    es.refresh(alias)
    env = {"PATHKEEPER_DATABASE_URL": database_url, "PATHKEEPER_ES_URL": es_url}
    fixed = CliRunner().invoke(main, ["verify", "--alias", alias, "--repair", "-q"], env=env)
    assert fixed.exit_code == 0, fixed.output
    assert "repaired 2" in fixed.output, fixed.output
    assert _doc(es, alias, "h", updated.id)["content"] == "original"
    assert _doc(es, alias, "h", huge.id)["content"] == "original"
    # The huge version stays (Elasticsearch never lowers one), yet later changes land.
    coord.write_file("h", huge.id, "legit change")
    coord.rename("h", updated.id, "renamed")
    live_worker.caught_up(coord)
    assert _doc(es, alias, "h", huge.id)["content"] == "legit change"
    assert _doc(es, alias, "h", updated.id)["path"] == "/renamed"
    assert index_docs(es, alias) == expected_index(coord)
    clean = CliRunner().invoke(main, ["verify", "--alias", alias, "-q"], env=env)
    assert clean.exit_code == 0, clean.output


def test_a_conflict_never_overwrites_a_newer_legitimate_write(
    coord: Coordinator, es: SearchEngine, alias: str, live_worker: RunningWorker,
) -> None:
    """The compare-and-swap path replaces only documents whose stored seq is older: a
    late write (a worker that lost its lease, a repair from an old bound) of an older
    state keeps losing to the newer legitimate document."""
    coord.create_namespace("l")
    old = coord.create_file("l", "/f", "old").node
    old_seq = live_worker.caught_up(coord)
    coord.write_file("l", old.id, "new")
    live_worker.caught_up(coord)
    late = send(es, [index_action(alias, old, old_seq)], lambda r: None)
    assert (late.already_newer, late.overridden, late.indexed) == (1, 0, 0)
    assert _doc(es, alias, "l", old.id)["content"] == "new"
    # The same late write against a hand-edited document (version ahead of its seq)
    # still loses: its stored seq is newer than the late write's.
    es.update(index=alias, id=old.id, routing="l", doc={"name": "f"}, refresh=True)
    late = send(es, [index_action(alias, old, old_seq)], lambda r: None)
    assert (late.already_newer, late.overridden) == (1, 0)
    assert _doc(es, alias, "l", old.id)["content"] == "new"
