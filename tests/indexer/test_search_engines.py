"""The search seam: the engine is asked of the server (or named in configuration),
and a server Pathkeeper does not support is refused with one clear error naming what
was found and what is supported, by the Python API and by every command (one
``error:`` line, exit 2).

Runs against the session's search server, whichever engine and version it is
(``PATHKEEPER_SEARCH``, ``PATHKEEPER_SEARCH_VERSION`` or ``ES_URL``), and against a
real HTTP server that is no search engine at all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.errors import InvalidConfiguration
from indexer import elasticsearch_index
from indexer.search_client import ENGINE_ENV, Found, check_supported, detect, open_search
from indexer.search_engine import (
    SUPPORTED,
    SearchConflict,
    SearchEngine,
    SearchNotFound,
    SearchUnavailable,
    UnsupportedEngine,
)
from pathkeeper.local.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_the_engine_and_version_are_asked_of_the_server(es_url: str, es: SearchEngine) -> None:
    found = detect(es_url)
    assert found.engine in SUPPORTED and found.major in SUPPORTED[found.engine]
    assert es.family == found.engine
    expected = os.environ.get("PATHKEEPER_SEARCH")
    if not os.environ.get("ES_URL") and expected in SUPPORTED:
        assert found.engine == expected
        wanted_version = os.environ.get("PATHKEEPER_SEARCH_VERSION")
        if wanted_version:
            assert found.version == wanted_version


def test_the_seam_speaks_one_language_on_every_engine(es: SearchEngine, alias: str) -> None:
    """The calls the indexer makes, and the typed errors it judges answers by."""
    index = elasticsearch_index.ensure_alias(es, alias)
    doc = {"namespace": "n", "node_id": "a", "name": "a", "kind": "file", "path": "/a",
           "tree": ["/a"], "seq": 3}
    es.index(alias, "a", doc, routing="n", version=3, version_type="external")
    with pytest.raises(SearchConflict) as conflict:
        es.index(alias, "a", {**doc, "seq": 2}, routing="n", version=2,
                 version_type="external")
    assert conflict.value.status == 409
    with pytest.raises(SearchNotFound):
        es.get(alias, "missing", routing="n")
    assert es.get(alias, "a", routing="n", source_includes=["seq"])["_source"] == {"seq": 3}
    es.refresh(alias)
    assert es.count(alias) == 1
    from indexer.index_scan import stream_index_docs  # a point in time on each engine

    assert [d["node_id"] for d in stream_index_docs(es, alias, page=1)] == ["a"]
    assert elasticsearch_index.request_limit(es) is not None
    assert elasticsearch_index.alias_targets(es, alias) == [index]


def test_a_server_that_is_no_search_engine_is_refused_by_name(other_server: str) -> None:
    with pytest.raises(UnsupportedEngine) as exc:
        detect(other_server)
    message = str(exc.value)
    assert "GET / answered 200" in message
    assert "Elasticsearch 8.x, 9.x; OpenSearch 2.x, 3.x" in message
    # The seam asks on first use: the first call says the same.
    es = open_search(other_server)
    with pytest.raises(UnsupportedEngine):
        elasticsearch_index.alias_targets(es, "pathkeeper-nodes")
    es.close()


@pytest.mark.parametrize("found", [Found("elasticsearch", "7.17.29"),
                                   Found("opensearch", "1.3.20"),
                                   Found("elasticsearch", "10.0.0")])
def test_an_unsupported_version_is_refused_naming_it(found: Found) -> None:
    with pytest.raises(UnsupportedEngine) as exc:
        check_supported(found)
    assert str(exc.value) == (f"the search server is {found.engine} {found.version}; "
                              "supported: Elasticsearch 8.x, 9.x; OpenSearch 2.x, 3.x")
    assert isinstance(exc.value, InvalidConfiguration)


def test_the_engine_can_be_named_instead(es_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    family = detect(es_url).engine
    monkeypatch.setenv(ENGINE_ENV, family)
    es = open_search(es_url)
    assert es.family == family
    es.close()
    monkeypatch.setenv(ENGINE_ENV, "solr")
    with pytest.raises(UnsupportedEngine, match="PATHKEEPER_SEARCH_ENGINE='solr': expected "
                                                 "one of elasticsearch, opensearch"):
        open_search(es_url)


def test_an_unreachable_server_is_a_typed_error_and_asked_again_later() -> None:
    es = open_search(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(SearchUnavailable):
        elasticsearch_index.alias_targets(es, "pathkeeper-nodes")
    with pytest.raises(SearchUnavailable):
        es.refresh("pathkeeper-nodes")
    es.close()


def test_the_cli_says_it_on_one_line(other_server: str, database_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PATHKEEPER_")}
    done = subprocess.run(
        [sys.executable, "-m", "pathkeeper", "indexer", "status", "--database-url",
         database_url, "--es-url", other_server],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=90,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the search server is not one "), lines
    assert "supported: Elasticsearch 8.x, 9.x; OpenSearch 2.x, 3.x" in lines[0]
    assert "Traceback" not in done.stderr
