"""verify, replay and reindex over two shards (two databases) writing into one index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from prometheus_client import REGISTRY
from shard_maps import FixedShards
from sqlalchemy import text

from coordinator import Coordinator
from coordinator.indexing import consumer_for
from coordinator.shard_admin import add_shard, init_directory
from coordinator.shard_map import Shard
from indexer import checkpoints, elasticsearch_index
from indexer.progress import Progress
from indexer.replay import build_and_swap, rebuild
from indexer.replay_shards import UntilNeedsShard, shard_for_until
from indexer.search_client import SearchSecurity
from indexer.search_engine import SearchEngine
from indexer.verify import scheduled_verify
from indexer.verify_shards import scheduled_verify_shards
from indexer.worker import Worker, WorkerConfig
from pathkeeper.cli.main import main
from pathkeeper.cli.replay import verify_report
from pathkeeper.local.postgres import LocalPostgres

from .conftest import diff_summary, expected_index, index_docs


@pytest.fixture
def second_url(pg_cluster: LocalPostgres) -> str:
    """A second shard: another database of the throwaway cluster."""
    return pg_cluster.create_database(f"pk_replay_b_{os.getpid()}_{time.monotonic_ns()}",
                                      template="pk_template")


@pytest.fixture
def coord_b(second_url: str) -> Iterator[Coordinator]:
    with Coordinator.connect(second_url, lock_timeout=5.0) as c:
        yield c


@pytest.fixture
def shards(database_url: str, second_url: str) -> list[Shard]:
    return [Shard("a", database_url), Shard("b", second_url)]


def fill(coord: Coordinator, ns: str, files: int = 5) -> None:
    coord.create_namespace(ns)
    coord.mkdir(ns, "/d")
    for i in range(files):
        coord.create_file(ns, f"/d/f{i}", f"{ns} {i}")
    coord.rename(ns, "/d/f0", "g0")


def index_once(shards: list[Shard], es_url: str, alias: str) -> None:
    config = WorkerConfig(database_url=shards[0].url, es_url=es_url, alias=alias,
                          partitions=2, once=True)
    assert Worker(config, FixedShards(shards)).run() == 0


def test_verify_over_two_shards_names_the_shard_of_a_drift(
    coord: Coordinator, coord_b: Coordinator, shards: list[Shard], es_url: str, alias: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fill(coord, "na")
    fill(coord_b, "nb")
    index_once(shards, es_url, alias)
    args = (es_url, SearchSecurity(), alias, (), False, True, 1.0)
    assert verify_report(shards, *args, Progress(enabled=False)) == 0
    out = capsys.readouterr().out
    # Each shard's documents are its own: none is "extra" for the other shard.
    assert out.count("documents compared, 0 drifted") == 2, out
    assert "shard a:\nindex " in out and "shard b:\nindex " in out
    # A drift on shard b (a row changed behind the log's back) is named with b.
    with coord_b.engine.begin() as conn:
        node_id = conn.execute(text(
            "UPDATE nodes SET content = 'tampered' WHERE namespace = 'nb' AND name = 'f1' "
            "RETURNING id")).scalar_one()
    assert verify_report(shards, *args, Progress(enabled=False)) == 1
    out = capsys.readouterr().out
    part_a, part_b = out.split("shard b:\n")
    assert "0 drifted" in part_a and "0 differ" in part_a
    assert f"  differs shard b nb {node_id} fields=content" in part_b
    assert "event log shard b: " in part_b and " 1 differ" in part_b


@pytest.mark.parametrize("source", ["events", "snapshot"])
def test_rebuild_from_two_shards_into_one_index_then_one_swap(
    coord: Coordinator, coord_b: Coordinator, shards: list[Shard], es: SearchEngine,
    es_url: str, alias: str, source: str,
) -> None:
    fill(coord, "na")
    fill(coord_b, "nb", files=7)
    index_once(shards, es_url, alias)
    (before,) = elasticsearch_index.alias_targets(es, alias)
    coord.write_file("na", "/d/f1", "after the worker")  # a tail no worker applied
    out = build_and_swap([("a", coord), ("b", coord_b)], es, source=source, alias=alias)
    result = out.result
    assert result.swapped and result.old_indices == [before] and result.deleted == [before]
    assert elasticsearch_index.alias_targets(es, alias) == [result.index]
    expected = {**expected_index(coord), **expected_index(coord_b)}
    actual = index_docs(es, alias)
    assert actual == expected, diff_summary(actual, expected)
    # Each shard's checkpoints of the live consumer are at its own final position (a's
    # moved past the write no worker applied; b's were there already).
    assert result.checkpoints_moved == 2
    for name, c in (("a", coord), ("b", coord_b)):
        with c.engine.connect() as conn:
            saved = checkpoints.load_all(conn, consumer_for(alias))
        assert sorted(saved) == [0, 1]
        assert min(saved.values()) >= out.final_positions[name] > 0


def test_replay_until_over_two_shards_needs_the_shard(
    coord: Coordinator, coord_b: Coordinator, es: SearchEngine, alias: str,
) -> None:
    with pytest.raises(UntilNeedsShard, match="name the shard with --shard"):
        shard_for_until(["a", "b"], None)
    assert shard_for_until(["a", "b"], "b") == "b"
    assert shard_for_until(["default"], None) == "default"
    fill(coord_b, "nb")
    until = coord_b.create_file("nb", "/late", "x").seq
    assert until is not None
    # The audit index of shard b as of its own position.
    result = rebuild(coord_b, es, alias=alias, until=until - 1)
    assert result.index is not None and not result.swapped
    docs = index_docs(es, result.index)
    assert {d["namespace"] for d in docs.values()} == {"nb"}
    assert "late" not in {d["name"] for d in docs.values()}


def test_replay_cli_shard_option_is_checked(database_url: str, es_url: str, alias: str) -> None:
    env = {"PATHKEEPER_DATABASE_URL": database_url, "PATHKEEPER_ES_URL": es_url}
    unknown = CliRunner().invoke(
        main, ["replay", "--alias", alias, "--until", "5", "--shard", "nope", "-q"], env=env)
    assert unknown.exit_code == 2
    assert unknown.output == "error: no shard nope: the shards are default\n"
    alone = CliRunner().invoke(main, ["replay", "--alias", alias, "--shard", "default"], env=env)
    assert alone.exit_code == 2
    assert alone.output == "error: --shard is for --until (a position of that shard's log)\n"


def test_scheduled_verify_over_two_shards_counts_only_drift(
    coord: Coordinator, coord_b: Coordinator, shards: list[Shard], es: SearchEngine,
    es_url: str, alias: str,
) -> None:
    fill(coord, "na")
    fill(coord_b, "nb")
    index_once(shards, es_url, alias)
    pairs = [("a", coord), ("b", coord_b)]
    # One shard's view alone takes the other's documents for extras: why the worker's
    # scheduled job runs over every shard.
    assert scheduled_verify(coord, es, alias) == len(expected_index(coord_b))
    assert scheduled_verify_shards(pairs, es, alias, lambda _: None) == 0
    with coord_b.engine.begin() as conn:
        conn.execute(text("UPDATE nodes SET content = 'tampered' "
                          "WHERE namespace = 'nb' AND name = 'f2'"))
    assert scheduled_verify_shards(pairs, es, alias, lambda _: None) == 1
    assert REGISTRY.get_sample_value("pathkeeper_verify_drift") == 1


def test_status_and_verify_commands_over_a_directory(
    pg_cluster: LocalPostgres, es_url: str, alias: str,
) -> None:
    n = time.monotonic_ns()
    default = pg_cluster.create_database(f"pk_dir_a_{n}", template="pk_template")
    b = pg_cluster.create_database(f"pk_dir_b_{n}", template="pk_template")
    directory = pg_cluster.create_database(f"pk_dir_{n}")
    init_directory(directory, default)
    add_shard(directory, "b", b)
    with Coordinator.connect(directory_url=directory, lock_timeout=5.0) as coord:
        coord.create_namespace("na", shard="default")
        coord.create_namespace("nb", shard="b")
        for ns in ("na", "nb"):
            coord.create_file(ns, "/f", ns)
    env = {"PATHKEEPER_DIRECTORY_URL": directory, "PATHKEEPER_ES_URL": es_url}
    # The worker command over the directory's servers, as a process of its own.
    ran = subprocess.run(
        [sys.executable, "-m", "pathkeeper", "indexer", "run", "--once", "--alias", alias,
         "--partitions", "2"], env={**os.environ, **env}, capture_output=True, text=True,
        timeout=120)
    assert ran.returncode == 0, ran.stderr
    status = CliRunner().invoke(main, ["indexer", "status", "--alias", alias, "--json"],
                                env=env)
    assert status.exit_code == 0, status.output
    doc = json.loads(status.output)
    assert [s["name"] for s in doc["shards"]] == ["b", "default"]
    assert doc["lag_events"] == 0 and doc["warnings"] == []
    checked = CliRunner().invoke(main, ["verify", "--alias", alias, "-q"], env=env)
    assert checked.exit_code == 0, checked.output
    assert "shard b:\n" in checked.output and "shard default:\n" in checked.output
    assert checked.output.count("documents compared, 0 drifted") == 2


def test_replay_and_reindex_commands_over_a_directory(
    pg_cluster: LocalPostgres, es: SearchEngine, es_url: str, alias: str,
) -> None:
    """``replay`` and ``reindex`` with --directory-url build one index from every
    shard (one swap), each namespace's documents from its own shard; ``--namespace``
    rebuilds a namespace from its shard; ``--until`` names a shard."""
    n = time.monotonic_ns()
    default = pg_cluster.create_database(f"pk_rdir_a_{n}", template="pk_template")
    b = pg_cluster.create_database(f"pk_rdir_b_{n}", template="pk_template")
    directory = pg_cluster.create_database(f"pk_rdir_{n}")
    init_directory(directory, default)
    add_shard(directory, "b", b)
    with Coordinator.connect(directory_url=directory, lock_timeout=5.0) as coord:
        coord.create_namespace("na", shard="default")
        coord.create_namespace("nb", shard="b")
        for ns in ("na", "nb"):
            coord.mkdir(ns, "/d")
            for i in range(3):
                coord.create_file(ns, f"/d/f{i}", f"{ns} {i}")
            coord.rename(ns, "/d/f0", "g0")
    env = {"PATHKEEPER_DIRECTORY_URL": directory, "PATHKEEPER_ES_URL": es_url}
    with Coordinator.connect(default) as on_a, Coordinator.connect(b) as on_b:
        expected = {**expected_index(on_a), **expected_index(on_b)}

    def cli(*args: str) -> tuple[int, str]:
        got = CliRunner().invoke(main, [*args, "--alias", alias, "-q"], env=env)
        return got.exit_code, got.output

    code, out = cli("replay")
    assert code == 0, out
    assert "positions b " in out and ", default " in out and "swapped" in out, out
    assert index_docs(es, alias) == expected, diff_summary(index_docs(es, alias), expected)
    first = elasticsearch_index.alias_targets(es, alias)
    code, out = cli("reindex")
    assert code == 0, out
    assert elasticsearch_index.alias_targets(es, alias) != first
    assert index_docs(es, alias) == expected, diff_summary(index_docs(es, alias), expected)
    # One namespace, in place, from its own shard.
    [live] = elasticsearch_index.alias_targets(es, alias)
    for node_id, doc in expected.items():
        if doc["namespace"] == "nb":
            es.delete(live, node_id, routing="nb")
    assert len(index_docs(es, alias)) < len(expected)
    code, out = cli("replay", "--namespace", "nb")
    assert code == 0, out
    assert index_docs(es, alias) == expected, diff_summary(index_docs(es, alias), expected)
    code, out = cli("replay", "--namespace", "nope")
    assert (code, out) == (2, "error: --namespace: no namespace 'nope'\n")
    code, out = cli("replay", "--until", "5")
    assert code == 2 and out.startswith("error: --until is a position of one shard's"), out
    code, out = cli("replay", "--until", "1", "--shard", "b", "--dry-run")
    assert code == 0 and "would write" in out, out
