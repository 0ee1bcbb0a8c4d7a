"""One log setup for every command: ``--log-format json|text`` (env
PATHKEEPER_LOG_FORMAT), JSON by default when stderr is not a terminal; ``serve``'s
uvicorn lines and its optional access log in the same format; the search client's
per-request INFO lines off."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import httpx

from pathkeeper.local.ports import free_port

DOWN_SEARCH = "http://127.0.0.1:9"


def pathkeeper(*args: str, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pathkeeper", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def log_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line and not line.startswith("error:")]


def test_worker_logs_json_by_default_and_text_on_request(database_url: str) -> None:
    once = ("indexer", "run", "--once", "--database-url", database_url, "--es-url",
            DOWN_SEARCH, "--give-up-after", "1")
    default = pathkeeper(*once)
    lines = log_lines(default.stderr)
    assert lines, default.stderr
    records = [json.loads(line) for line in lines]  # stderr is a pipe here: JSON
    assert {"ts", "level", "logger", "event"} <= set(records[0])
    assert any(r["event"] == "startup_failed" for r in records)

    for text in (pathkeeper("--log-format", "text", *once),
                 pathkeeper(*once, env={"PATHKEEPER_LOG_FORMAT": "text"})):
        lines = log_lines(text.stderr)
        assert lines and not any(line.startswith("{") for line in lines), text.stderr
        assert any(" WARNING pathkeeper.indexer startup_failed " in line for line in lines)
    bad = pathkeeper("--log-format", "xml", "db", "current", "--database-url", database_url)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")


def test_serve_logs_one_format_with_access_log(database_url: str, es_url: str) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pathkeeper", "serve", "--database-url", database_url,
         "--es-url", es_url, "--port", str(port), "--no-auth", "--access-log"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
        httpx.post(f"{base}/v1/namespaces", json={"name": "logs"})
        httpx.get(f"{base}/v1/namespaces/logs/search", params={"q": "x"})
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    records: list[dict[str, Any]] = [json.loads(line) for line in stderr.splitlines() if line]
    loggers = {r["logger"] for r in records}
    assert "uvicorn.error" in loggers  # uvicorn's own lines, in the same format
    access = [r for r in records if r["logger"] == "uvicorn.access"]
    assert {(r["method"], r["path"], r["status"]) for r in access} >= {
        ("GET", "/healthz", 200), ("POST", "/v1/namespaces", 201)}
    assert not any(name.startswith("elastic_transport") for name in loggers), loggers
