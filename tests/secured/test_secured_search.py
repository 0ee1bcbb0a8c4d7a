"""A search server with security on, as every production cluster runs: TLS with a CA
of its own and users. The indexer, replay, verify and the HTTP service's search reach
it with basic auth over TLS, from flags and from the environment; an API key is sent as
one (the server checks it); a wrong CA, a wrong password and plain http to the TLS port
are one clear ``error:`` line naming the server, never the secret; ``--help`` and debug
logs show no secret; a cloud id becomes the client's https endpoint."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, generate_latest

with warnings.catch_warnings():
    # Starlette 1.x asks for its httpx fork (httpx2) in TestClient; httpx works the same.
    warnings.filterwarnings("ignore", message=".*httpx2")
    from fastapi.testclient import TestClient

from coordinator import Coordinator
from coordinator.api_keys import create_key
from indexer.elasticsearch_index import drop_alias_and_indices
from indexer.search_client import SearchSecurity, cloud_url, open_search
from indexer.search_engine import SearchAuthFailed, SearchTlsFailed
from indexer.worker import Worker, WorkerConfig
from pathkeeper.http.app import create_app
from pathkeeper.http.settings import ServiceSettings, settings_from_json, settings_to_json
from pathkeeper.local.secured_search import SecuredSearchNode

#: A CA bundle that does not sign the node's certificate.
OTHER_CA = "/etc/ssl/certs/ca-certificates.crt"


def pathkeeper(*args: str, env: dict[str, str] | None = None,
               timeout: float = 180) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PATHKEEPER_SEARCH_")}
    return subprocess.run([sys.executable, "-m", "pathkeeper", *args], capture_output=True,
                          text=True, timeout=timeout, env={**clean, **(env or {})})


def error_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


@pytest.fixture
def secured_alias(secured: SecuredSearchNode) -> Iterator[str]:
    name = f"pk-secured-{os.getpid()}-{id(object())}"
    yield name
    es = open_search(secured.url, security=secured.security("superuser"))
    drop_alias_and_indices(es, name)
    for index in es.get_indices(f"{name}-*"):
        es.delete_index(index)
    es.close()


@pytest.fixture
def password_file(secured: SecuredSearchNode, tmp_path: Path) -> str:
    path = tmp_path / "search-password"
    path.write_text(secured.user_password + "\n")
    path.chmod(0o600)
    return str(path)


def write_tree(coord: Coordinator) -> None:
    coord.create_namespace("a")
    coord.mkdir("a", "/docs/secured", parents=True)
    coord.create_file("a", "/docs/secured/hello.txt", "hello secured world")
    coord.create_file("a", "/docs/other.txt", "nothing here")


def test_indexer_replay_verify_and_search_with_basic_auth_over_tls(
    secured: SecuredSearchNode, coord: Coordinator, database_url: str, secured_alias: str,
    password_file: str,
) -> None:
    write_tree(coord)
    flags = ["--es-url", secured.url, "--search-user", secured.user,
             "--search-password-file", password_file, "--search-ca-certs", secured.ca_certs]
    run = pathkeeper("indexer", "run", "--once", "--database-url", database_url,
                     "--alias", secured_alias, "--give-up-after", "60", *flags)
    assert run.returncode == 0, run.stderr
    verify = pathkeeper("verify", "--database-url", database_url, "--alias", secured_alias,
                        "-q", *flags)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "0 drifted" in verify.stdout
    replay = pathkeeper("replay", "--database-url", database_url, "--alias", secured_alias,
                        "-q", *flags)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "swapped" in replay.stdout

    # The HTTP service's search, through the same settings object (and as its worker
    # processes get it).
    settings = settings_from_json(settings_to_json(ServiceSettings(
        database_url=database_url, es_url=secured.url, index_alias=secured_alias,
        search_security=secured.security("basic"), auth_cache_seconds=0.0)))
    key = create_key(coord.engine, ["a"], "read")[1]
    with TestClient(create_app(settings)) as client:
        resp = client.get("/v1/namespaces/a/search", params={"q": "hello"},
                          headers={"Authorization": f"Bearer {key}"})
    assert resp.status_code == 200, resp.text
    assert [hit["path"] for hit in resp.json()["hits"]] == ["/docs/secured/hello.txt"]


def test_the_environment_carries_the_connection_options(
    secured: SecuredSearchNode, coord: Coordinator, database_url: str, secured_alias: str,
) -> None:
    write_tree(coord)
    env = {"PATHKEEPER_ES_URL": secured.url, "PATHKEEPER_SEARCH_USER": secured.user,
           "PATHKEEPER_SEARCH_PASSWORD": secured.user_password,
           "PATHKEEPER_SEARCH_CA_CERTS": secured.ca_certs}
    run = pathkeeper("indexer", "run", "--once", "--database-url", database_url,
                     "--alias", secured_alias, env=env)
    assert run.returncode == 0, run.stderr
    verify = pathkeeper("verify", "--database-url", database_url, "--alias", secured_alias,
                        "-q", env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    status = pathkeeper("indexer", "status", "--database-url", database_url,
                        "--alias", secured_alias, env=env)
    assert status.returncode == 0, status.stderr
    assert f"alias {secured_alias}: {secured_alias}-" in status.stdout


def test_an_api_key_is_sent_as_one_and_a_refused_key_is_not_shown(
    secured: SecuredSearchNode, database_url: str, tmp_path: Path,
) -> None:
    """The integ-test node cannot issue API keys (they live in its ``.security`` index,
    which needs an analysis module the distribution lacks): the server checks the key
    it is sent over TLS and refuses it, with the engine asked and with it named."""
    key = "pathkeeper-test-id:not-a-real-key-6f1e"
    key_file = tmp_path / "key"
    key_file.write_text(key)
    for extra in ({}, {"PATHKEEPER_SEARCH_ENGINE": "elasticsearch"}):
        proc = pathkeeper("verify", "--database-url", database_url, "--es-url", secured.url,
                          "--search-api-key-file", str(key_file),
                          "--search-ca-certs", secured.ca_certs, "-q", env=extra)
        assert proc.returncode == 2, proc.stderr
        assert error_lines(proc) == [
            f"error: the search server at {secured.url} refused the credentials: unable to "
            "authenticate with provided credentials and anonymous access is not allowed for "
            "this request; check --search-user and --search-password, or --search-api-key "
            "(or their PATHKEEPER_SEARCH_* variables)"], proc.stderr
        assert "not-a-real-key" not in proc.stdout + proc.stderr
    # The header it sent is the server's form of an API key: base64 of id:key.
    sent = SearchSecurity(api_key=key).headers()["Authorization"]
    assert sent == "ApiKey cGF0aGtlZXBlci10ZXN0LWlkOm5vdC1hLXJlYWwta2V5LTZmMWU="
    assert SearchSecurity(api_key=sent.split()[1]).headers()["Authorization"] == sent


def test_a_wrong_password_names_the_server_not_the_password(
    secured: SecuredSearchNode, database_url: str,
) -> None:
    wrong = "Wr0ng-Pa55word-x9"
    for extra in ({}, {"PATHKEEPER_SEARCH_ENGINE": "elasticsearch"}):
        proc = pathkeeper("verify", "--database-url", database_url, "--es-url", secured.url,
                          "--search-user", secured.user, "--search-ca-certs", secured.ca_certs,
                          "-q", env={"PATHKEEPER_SEARCH_PASSWORD": wrong, **extra})
        assert proc.returncode == 2, proc.stderr
        lines = error_lines(proc)
        assert len(lines) == 1, proc.stderr
        assert lines[0].startswith(
            f"error: the search server at {secured.url} refused the credentials: "
            f"unable to authenticate user [{secured.user}]"), lines
        assert wrong not in proc.stdout + proc.stderr


def test_indexer_once_gives_up_on_refused_credentials(
    secured: SecuredSearchNode, database_url: str, secured_alias: str,
) -> None:
    """The worker waits for a server that refuses it (credentials may be fixed at the
    server); ``--once`` must still end, with the refusal as its one line."""
    wrong = "Wr0ng-Pa55word-once"
    proc = pathkeeper("indexer", "run", "--once", "--database-url", database_url,
                      "--alias", secured_alias, "--es-url", secured.url, "--give-up-after", "3",
                      "--search-user", secured.user, "--search-ca-certs", secured.ca_certs,
                      env={"PATHKEEPER_SEARCH_PASSWORD": wrong}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = error_lines(proc)
    assert len(lines) == 1 and lines[0].startswith(
        f"error: gave up after 3 s: the search server at {secured.url} refused the "
        "credentials: unable to authenticate user"), proc.stderr
    assert wrong not in proc.stdout + proc.stderr


def test_a_wrong_ca_is_refused_in_one_line(secured: SecuredSearchNode,
                                           database_url: str) -> None:
    for extra in ({}, {"PATHKEEPER_SEARCH_ENGINE": "elasticsearch"}):
        proc = pathkeeper("verify", "--database-url", database_url, "--es-url", secured.url,
                          "--search-user", secured.user, "--search-ca-certs", OTHER_CA, "-q",
                          env={"PATHKEEPER_SEARCH_PASSWORD": secured.user_password, **extra})
        assert proc.returncode == 2, proc.stderr
        assert error_lines(proc) == [
            f"error: TLS with the search server at {secured.url} failed: its certificate "
            "was not accepted (unable to get local issuer certificate): give the CA that "
            "signs it with --search-ca-certs"], proc.stderr
    # The same, typed, for a caller of the seam (and without any CA: the system's).
    with pytest.raises(SearchTlsFailed, match="unable to get local issuer certificate"):
        open_search(secured.url, security=SearchSecurity(
            user=secured.user, password=secured.user_password)).count("pk-*")


def test_plain_http_to_the_tls_port_is_a_clear_error(secured: SecuredSearchNode,
                                                     database_url: str) -> None:
    plain = secured.url.replace("https://", "http://")
    for extra in ({}, {"PATHKEEPER_SEARCH_ENGINE": "elasticsearch"}):
        proc = pathkeeper("verify", "--database-url", database_url, "--es-url", plain,
                          "--search-user", secured.user, "-q",
                          env={"PATHKEEPER_SEARCH_PASSWORD": secured.user_password, **extra})
        assert proc.returncode == 2, proc.stderr
        assert error_lines(proc) == [
            f"error: the search server at {plain} closed the connection without an "
            "answer; if it wants TLS, use an https:// URL"], proc.stderr
    not_pem = pathkeeper("verify", "--database-url", database_url, "--es-url", secured.url,
                         "--search-ca-certs", __file__, "-q")
    assert error_lines(not_pem) == [
        f"error: the search CA certificate file {__file__} holds no PEM certificate"
    ], not_pem.stderr
    proc = pathkeeper("verify", "--database-url", database_url, "--es-url", plain,
                      "--search-ca-certs", secured.ca_certs, "-q")
    assert error_lines(proc) == [
        f"error: a CA certificate (--search-ca-certs) is for an https:// search server; "
        f"{plain} is plain http"], proc.stderr


def test_help_shows_no_secret_from_the_environment() -> None:
    secret = "H3lp-Secret-Value-42"
    env = {"PATHKEEPER_SEARCH_PASSWORD": secret, "PATHKEEPER_SEARCH_API_KEY": secret,
           "PATHKEEPER_SEARCH_USER": "someone"}
    for command in (["indexer", "run"], ["verify"], ["replay"], ["reindex"], ["serve"],
                    ["indexer", "status"], ["indexer", "dead-letters"]):
        proc = pathkeeper(*command, "--help", env=env)
        assert proc.returncode == 0, proc.stderr
        text = " ".join(proc.stdout.split())
        for option in ("--search-user", "--search-password", "--search-password-file",
                       "--search-api-key", "--search-api-key-file", "--search-ca-certs",
                       "--search-cloud-id"):
            assert option in text, (command, option)
        assert secret not in proc.stdout and "someone" not in proc.stdout, command


def test_no_secret_in_debug_logs_reprs_or_metrics(
    secured: SecuredSearchNode, coord: Coordinator, database_url: str, secured_alias: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    write_tree(coord)
    security = secured.security("basic")
    secret = secured.user_password
    caplog.set_level(logging.DEBUG)
    # A CLI run earlier in the session may have quieted the client's logger (the log
    # setup does, by design): this test needs its DEBUG lines, so it asks for them.
    caplog.set_level(logging.DEBUG, logger="elastic_transport")
    worker = Worker(WorkerConfig(database_url=database_url, es_url=secured.url,
                                 alias=secured_alias, partitions=1, once=True,
                                 es_options={"security": security}))
    assert worker.run() == 0
    es = open_search(secured.url, security=security)
    es.refresh(secured_alias)
    assert es.count(secured_alias) == 4
    with pytest.raises(SearchAuthFailed) as refused:
        open_search(secured.url, security=SearchSecurity(
            user=secured.user, password=secret + "x", ca_certs=secured.ca_certs),
            engine="elasticsearch").count(secured_alias)
    assert secret not in str(refused.value) and secret not in repr(refused.value)
    assert any("elastic_transport" in r.name for r in caplog.records)  # DEBUG was on
    assert secret not in caplog.text
    for shown in (security, es, ServiceSettings(database_url=database_url,
                                                search_security=security)):
        assert secret not in repr(shown) and secret not in str(shown)
    assert secret not in generate_latest(REGISTRY).decode()
    es.close()


def test_a_cloud_id_is_the_https_endpoint_it_names(database_url: str) -> None:
    # name:base64("<domain>:<port>$<elasticsearch id>$<kibana id>"), as Elastic Cloud shows it
    import base64

    encoded = base64.b64encode(b"pathkeeper.invalid:9243$es0123$kb0123").decode()
    cloud_id = f"my-deployment:{encoded}"
    assert cloud_url(cloud_id) == "https://es0123.pathkeeper.invalid:9243"
    default_port = base64.b64encode(b"pathkeeper.invalid$es0123$kb0123").decode()
    assert cloud_url(f"x:{default_port}") == "https://es0123.pathkeeper.invalid:443"

    security = SearchSecurity(cloud_id=cloud_id, user="elastic", password="pw-cloud-1")
    url = security.url(None)
    assert url is not None
    es = open_search(url, security=security, engine="elasticsearch")
    node = es.client.transport.node_pool.all()[0].config  # type: ignore[attr-defined]
    assert (node.scheme, node.host, node.port) == ("https", "es0123.pathkeeper.invalid", 9243)

    proc = pathkeeper("verify", "--database-url", database_url, "--search-cloud-id", cloud_id,
                      "--search-user", "elastic", "-q",
                      env={"PATHKEEPER_SEARCH_PASSWORD": "pw-cloud-1"})
    assert proc.returncode == 2, proc.stderr
    lines = error_lines(proc)
    assert len(lines) == 1 and lines[0].startswith(
        "error: cannot reach the search server at https://es0123.pathkeeper.invalid:9243: "
    ), proc.stderr
    assert "pw-cloud-1" not in proc.stderr

    both = pathkeeper("verify", "--database-url", database_url, "--search-cloud-id", cloud_id,
                      "--es-url", "http://127.0.0.1:9200", "-q")
    assert error_lines(both) == [
        "error: give the search server's URL or its cloud id, not both"], both.stderr
    bad = pathkeeper("verify", "--database-url", database_url, "--search-cloud-id", "nonsense",
                     "-q")
    assert error_lines(bad) == [
        "error: the search cloud id cannot be parsed; expected <name>:<base64>, as the "
        "deployment's page shows it"], bad.stderr


def test_the_opensearch_adapter_passes_credentials_and_ca_to_its_client(
    secured: SecuredSearchNode,
) -> None:
    """No OpenSearch distribution here has its security plugin; what can be checked is
    that opensearch-py, as the adapter sets it up, speaks TLS with the CA and basic auth
    to a real secured server (the REST calls it makes are the ones both engines share)."""
    from coordinator.errors import InvalidConfiguration

    es = open_search(secured.url, engine="opensearch", security=secured.security("basic"))
    assert "defaults" in es.cluster_settings("defaults.http.max_content_length")
    es.health(5.0)
    es.close()
    with pytest.raises(SearchAuthFailed, match=f"at {secured.url} refused the credentials"):
        open_search(secured.url, engine="opensearch", security=SearchSecurity(
            user=secured.user, password="wrong-pw-1", ca_certs=secured.ca_certs)).health(5.0)
    with pytest.raises(SearchTlsFailed, match="unable to get local issuer certificate"):
        open_search(secured.url, engine="opensearch", security=SearchSecurity(
            user=secured.user, password=secured.user_password, ca_certs=OTHER_CA)).health(5.0)
    with pytest.raises(InvalidConfiguration, match="OpenSearch takes no Elasticsearch API key"):
        open_search(secured.url, engine="opensearch", security=SearchSecurity(
            api_key="id:key", ca_certs=secured.ca_certs)).health(5.0)
