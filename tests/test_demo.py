"""The README's main job runs end to end: PostgreSQL, search server, worker, API, search."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

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
    # No URL that is dead by the time it is read: it says the API stops.
    assert "Authorization: Bearer pk_" not in done.stdout
    assert done.stdout.rstrip().endswith("(--no-serve: the HTTP API stops now; without it the "
                                         "demo keeps serving it)")


def _demo(*args: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "pathkeeper", "demo", "--seconds", "1", "--clients", "2", *args]
    if os.environ.get("ES_URL"):
        cmd += ["--es-url", os.environ["ES_URL"]]
    env = {k: v for k, v in os.environ.items() if k != "PATHKEEPER_DATABASE_URL"}
    # stdin not a terminal, as under a service manager, a script or CI.
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _until_serving(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("serving "):
            return lines
    raise AssertionError("\n".join(lines) + (proc.stderr.read() if proc.stderr else ""))


def test_without_a_terminal_the_demo_serves_until_sigterm() -> None:
    proc = _demo()
    try:
        lines = _until_serving(proc)
        assert lines[-1] == ("serving until Ctrl-C or SIGTERM (--serve-for 10m bounds it, "
                             "--no-serve exits at once) ...")
        url = next(line.split()[3] for line in lines if line.startswith("HTTP API on "))
        curl = next(line for line in lines if "Authorization: Bearer " in line)
        secret = curl.split("Bearer ")[1].split("'")[0]
        answer = httpx.get(f"{url}/v1/namespaces/demo/node", params={"path": "/archive"},
                           headers={"Authorization": f"Bearer {secret}"}, timeout=30)
        assert answer.status_code == 200, answer.text  # the URL printed is alive
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-3000:]
        assert out.splitlines()[-1] == "stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_serve_for_bounds_it() -> None:
    proc = _demo("--serve-for", "1s")
    try:
        lines = _until_serving(proc)
        assert lines[-1] == "serving for 1s (or until Ctrl-C or SIGTERM) ..."
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-3000:]
        assert out.splitlines()[-1] == "stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
