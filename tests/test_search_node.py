"""``pathkeeper search-node``: a throwaway local node of the engine and version asked for,
fetched from Maven Central into the cache and run on a JDK that suits it; a version
Pathkeeper is not tested with is refused with one line naming the supported ones."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request

import pytest
from click.testing import CliRunner

from pathkeeper.cli.main import main
from pathkeeper.local.search import new_local_search
from pathkeeper.local.search_node import (
    RELEASES,
    LocalSearchNode,
    LocalServerError,
    find_java,
    release,
)


def test_an_untested_version_or_unknown_engine_is_refused_in_one_line() -> None:
    result = CliRunner().invoke(main, ["search-node", "--engine", "opensearch",
                                       "--version", "1.3.0"])
    assert result.exit_code == 2
    assert result.output.strip() == (
        "error: OpenSearch 1.3.0 is not a version Pathkeeper is tested with: "
        "supported 2.19.1, 3.3.0")
    with pytest.raises(LocalServerError, match="unknown search engine 'solr'"):
        release("solr")


def test_a_new_local_node_takes_the_configuration_lines_asked_for() -> None:
    # A benchmark asks its node for a clock read each time (``took`` in milliseconds).
    lines = {"thread_pool.estimated_time_interval": "0"}
    node = new_local_search(engine="elasticsearch", settings=lines)
    assert isinstance(node, LocalSearchNode)
    assert node.settings == lines
    assert new_local_search(engine="elasticsearch").settings == {}


def test_each_release_gets_a_jdk_it_runs_on() -> None:
    for (engine, version), rel in RELEASES.items():
        home = find_java(rel)
        text = (home / "release").read_text()
        major = int(re.search(r'JAVA_VERSION="(\d+)', text).group(1))  # type: ignore[union-attr]
        assert major >= rel.min_java, (engine, version, home)


def test_search_node_runs_opensearch_3_as_asked() -> None:
    """The command a user types, as a process: it prints the node's URL, the node is
    OpenSearch 3.3.0 (on a JDK 21+, which the machine's default JDK 17 is not), and
    SIGTERM stops it and everything it started."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pathkeeper", "search-node", "--engine", "opensearch",
         "--version", "3.3.0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.match(r"OpenSearch 3\.3\.0 on (http://127\.0\.0\.1:\d+) \(pid (\d+)\)", line)
        assert match, line + proc.stdout.read()
        with urllib.request.urlopen(match.group(1), timeout=10) as resp:
            info = json.load(resp)
        assert info["version"]["distribution"] == "opensearch"
        assert info["version"]["number"] == "3.3.0"
        node_pgid = int(match.group(2))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()
    assert proc.returncode == 0
    with pytest.raises(ProcessLookupError):
        os.killpg(node_pgid, 0)
