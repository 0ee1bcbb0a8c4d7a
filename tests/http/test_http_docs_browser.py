"""``/docs`` and ``/redoc`` render in a real browser (Debian's chromium, headless) that
can reach nothing but the service: every host name but 127.0.0.1 fails to resolve."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from http_support import LiveServer

from pathkeeper.http.app import create_app
from pathkeeper.http.settings import ServiceSettings


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path is not None:
            return path
    pytest.fail("chromium not found: install Debian's chromium package (.ci/run does)")


def rendered(url: str, profile: Path) -> str:
    """The page's DOM once its scripts ran (up to 15 s of the page's own time)."""
    proc = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--virtual-time-budget=15000",
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--dump-dom", url],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_docs_render_with_no_network(settings: ServiceSettings, tmp_path: Path) -> None:
    with LiveServer(create_app(settings)) as server:
        swagger = rendered(f"{server.url}/docs", tmp_path / "swagger")
        redoc = rendered(f"{server.url}/redoc", tmp_path / "redoc")
    # Swagger UI built one block per operation from /openapi.json.
    assert 'data-path="/v1/namespaces/{ns}/node/rename"' in swagger
    assert 'data-path="/healthz"' in swagger
    # ReDoc rendered the operations' summaries.
    assert "Rename Node" in redoc and "Stat Node By Id" in redoc
