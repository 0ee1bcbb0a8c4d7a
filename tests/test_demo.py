"""The README's main job runs end to end: PostgreSQL, search server, worker, API, search."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_demo_indexes_and_finds_every_renamed_file() -> None:
    cmd = [sys.executable, "-m", "pathkeeper", "demo", "--seconds", "1", "--clients", "4",
           "--no-serve"]
    if os.environ.get("ES_URL"):
        cmd += ["--es-url", os.environ["ES_URL"]]
    env = {k: v for k, v in os.environ.items() if k != "PATHKEEPER_DATABASE_URL"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "every file still in place" in done.stdout
    assert "finds 18 files:" in done.stdout
    assert "Authorization: Bearer pk_" in done.stdout
