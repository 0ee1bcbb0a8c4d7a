"""The built wheel works outside the checkout: installed into a fresh virtualenv in a
temporary directory, it migrates an empty database (``pathkeeper db upgrade``, the
migrations shipped inside the package), reports its revision, serves the API and the
operator page, and a rename made through the installed client reads back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from coordinator.migrate import head_revision
from pathkeeper.local.ports import free_port
from pathkeeper.local.postgres import LocalPostgres

ROOT = Path(__file__).resolve().parent.parent

CLIENT_SCRIPT = """
import sys
from pathkeeper.client import Client

with Client(sys.argv[1]) as c:
    c.create_namespace("w")
    c.mkdir("w", "/clinton/projects", parents=True)
    c.create_file("w", "/clinton/projects/README.txt", "hello")
    c.rename("w", "/clinton", "bill")
    node = c.stat("w", "/bill/projects/README.txt")
    print(node.path, node.kind)
"""


def _clean_env() -> dict[str, str]:
    """The environment without anything that would let the checkout's code be imported."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    return env


def _run(cmd: list[str], cwd: Path, timeout: float = 600) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=_clean_env(), capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{cmd}: {done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv outside the checkout with the wheel built from it installed:
    its ``bin`` directory."""
    work = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work / "dist"),
          str(ROOT)], cwd=work)
    wheels = list((work / "dist").glob("pathkeeper-*.whl"))
    assert len(wheels) == 1, wheels
    _run([sys.executable, "-m", "venv", str(work / "venv")], cwd=work)
    bin_dir = work / "venv" / "bin"
    _run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheels[0])], cwd=work)
    return bin_dir


def test_wheel_migrates_serves_and_renames_outside_the_checkout(
    installed: Path, pg_cluster: LocalPostgres, tmp_path: Path
) -> None:
    url = pg_cluster.create_database(f"pk_wheel_{os.getpid()}")
    pk = str(installed / "pathkeeper")
    # Imported from site-packages, not from the checkout.
    where = _run([str(installed / "python"), "-c",
                  "import coordinator.migrate as m; print(m.migrations_dir())"], cwd=tmp_path)
    assert "site-packages" in where and str(ROOT) not in where, where

    assert _run([pk, "db", "current", "--database-url", url], cwd=tmp_path).startswith("none")
    upgraded = _run([pk, "db", "upgrade", "--database-url", url], cwd=tmp_path)
    assert upgraded.strip() == f"database upgraded to {head_revision()}"
    assert _run([pk, "db", "current", "--database-url", url],
                cwd=tmp_path).strip() == f"{head_revision()} (head)"
    history = _run([pk, "db", "history", "--database-url", url], cwd=tmp_path).splitlines()
    assert history[-1].startswith(f"* {head_revision()}"), history
    assert _run([pk, "--version"], cwd=tmp_path).startswith("pathkeeper, version ")

    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        server = subprocess.Popen(
            [pk, "serve", "--database-url", url, "--no-auth", "--port", str(port),
             "--log-level", "warning"],
            cwd=tmp_path, env=_clean_env(), stdout=sink, stderr=sink, start_new_session=True,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, log.read_text()
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the installed serve did not come up"
            time.sleep(0.2)
        out = _run([str(installed / "python"), "-c", CLIENT_SCRIPT, base], cwd=tmp_path)
        assert out.split() == ["/bill/projects/README.txt", "file"]
        # The operator page's files are package data of the wheel.
        page = httpx.get(f"{base}/ui", timeout=10)
        assert page.status_code == 200 and 'src="/ui/app.js"' in page.text
        for asset in ("app.js", "app.css"):
            assert httpx.get(f"{base}/ui/{asset}", timeout=10).status_code == 200, asset
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
