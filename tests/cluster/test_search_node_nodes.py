"""``pathkeeper search-node --nodes N`` starts a local cluster (the class the cluster
kill test runs, ``pathkeeper.local.search_cluster``); the stand-in, one process, has no
cluster to offer and says so in one line."""

from __future__ import annotations

from click.testing import CliRunner

from pathkeeper.cli.main import main


def test_nodes_of_the_stand_in_are_refused_in_one_line() -> None:
    result = CliRunner().invoke(main, ["search-node", "--engine", "noida", "--nodes", "3"])
    assert result.exit_code == 2
    assert result.output.strip() == (
        "error: noida-db, the stand-in, runs as one process: --nodes needs elasticsearch "
        "or opensearch")


def test_no_nodes_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["search-node", "--nodes", "0"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "--nodes" in lines[0]
