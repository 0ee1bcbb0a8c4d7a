"""The shipped monitoring: ``deploy/prometheus/alerts.yml`` passes ``promtool check rules``
and its unit tests (``promtool test rules``), and every metric the rules and the Grafana
dashboard (``deploy/grafana/pathkeeper.json``) use is exported by a real running worker
or ``serve`` (scraped over HTTP)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from pathkeeper.local.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "pathkeeper.json"
METRIC = re.compile(r"\bpathkeeper_[a-z0-9_]+")
#: What Prometheus adds to a family's name in its samples.
SUFFIXES = ("", "_total", "_count", "_sum", "_bucket", "_created", "_info")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: install Debian's prometheus package (.ci/run does)")
    return path


def test_rules_pass_promtool() -> None:
    checked = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([promtool(), "test", "rules", str(RULE_TESTS)],
                            capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def used_metrics() -> dict[str, set[str]]:
    """Metric names by where they are used (an alert, a dashboard panel)."""
    used: dict[str, set[str]] = {}
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            used[f"alert {rule['alert']}"] = set(METRIC.findall(rule["expr"]))
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            used.setdefault(f"panel {panel['title']}", set()).update(
                METRIC.findall(target["expr"]))
    for variable in dashboard["templating"]["list"]:
        used[f"variable {variable['name']}"] = set(METRIC.findall(json.dumps(variable)))
    return used


def scrape(url: str) -> set[str]:
    """The sample names a /metrics page can carry: each family's, with its suffixes."""
    text = httpx.get(url, timeout=10).text
    return {family.name + suffix for family in text_string_to_metric_families(text)
            for suffix in SUFFIXES}


@contextmanager
def running(args: list[str], ready_url: str) -> Iterator[None]:
    proc = subprocess.Popen([sys.executable, "-m", "pathkeeper", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PATHKEEPER_LOG_FORMAT": "json"})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(ready_url, timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "did not start"
            time.sleep(0.1)
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_every_metric_used_is_exported(database_url: str, es_url: str, alias: str) -> None:
    worker_port, api_port = free_port(), free_port()
    worker_url = f"http://127.0.0.1:{worker_port}/metrics"
    api_url = f"http://127.0.0.1:{api_port}/metrics"
    with running(["indexer", "run", "--database-url", database_url, "--es-url", es_url,
                  "--alias", alias, "--metrics-port", str(worker_port),
                  "--verify-cron", "0 3 * * *", "--snapshot-cron", "0 4 * * *"], worker_url):
        # The metrics page answers before the worker has scheduled its jobs, whose
        # modules define the snapshot and verify metrics: scrape until it has settled.
        exported = scrape(worker_url)
        deadline = time.monotonic() + 30
        while "pathkeeper_snapshot_failures_total" not in exported:
            assert time.monotonic() < deadline, "the worker never scheduled its snapshot job"
            time.sleep(0.2)
            exported = scrape(worker_url)
    with running(["serve", "--database-url", database_url, "--port", str(api_port),
                  "--no-auth"], api_url):
        exported |= scrape(api_url)
    used = used_metrics()
    assert sum(len(names) for names in used.values()) > 30
    missing = {where: sorted(names - exported) for where, names in used.items()
               if names - exported}
    assert not missing, missing
