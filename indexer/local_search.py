"""A throwaway local Elasticsearch-compatible server (noida-db) for tests, the demo and
benchmarks.

Runs the binary bundled in the ``noida-db`` package directly, with only the
Elasticsearch service, on a free port and a fresh data directory, and reads the
URL from its log line ``elasticsearch  http://127.0.0.1:PORT``. After ``stop()``
or ``kill()``, ``start()`` brings it back on the same port and data directory
(how the tests simulate an Elasticsearch outage).

Differences from real Elasticsearch 8.x we know of (code is written to the real
documented behaviour; tests must not depend on these): it forgets delete
tombstones at once (no ``index.gc_deletes``), accepts bulk ``update`` with an
external version, accepts unknown mapping parameters, implements a Painless
subset without ``throw``, answers ``refresh=wait_for`` at once, loses about the
last second of writes on ``kill -9``, and its search cost grows with index size.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from importlib.resources import files
from pathlib import Path
from types import TracebackType

URL_LINE = re.compile(r"elasticsearch\s+(http://\S+)")


def noida_binary() -> Path:
    """The path of the noida-db binary bundled in the Python package."""
    path = Path(str(files("noida_db").joinpath("noida-db")))
    if not path.is_file():
        raise RuntimeError(f"noida-db binary not found at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


class LocalSearch:
    """A running local search server; ``.url`` is its HTTP address.

    Use as a context manager, or call ``start()`` and ``stop()``.
    """

    def __init__(
        self, data_dir: str | Path | None = None, port: int = 0, startup_timeout: float = 30.0
    ) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="pathkeeper-search-"))
        self.port = port
        self.startup_timeout = startup_timeout
        self.url = ""
        self._proc: subprocess.Popen[str] | None = None
        self._pump: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> str:
        """Start the server (on the previous port, if it ran before) and wait until it
        answers HTTP; returns its URL."""
        if self.running:
            return self.url
        cmd = [
            str(noida_binary()), "start", "--only", "elasticsearch",
            "--elasticsearch-port", str(self.port), "--data-dir", str(self.data_dir / "data"),
        ]
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            start_new_session=True,  # a Ctrl-C in the terminal is ours to forward, not its
        )
        self._proc = proc
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            # Keep draining stdout for the server's whole life, or it blocks on a full pipe.
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        self._pump = threading.Thread(target=pump, name="noida-stdout", daemon=True)
        self._pump.start()
        deadline = time.monotonic() + self.startup_timeout
        url = ""
        while not url:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise RuntimeError("noida-db did not print its URL in time")
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"noida-db exited early with code {proc.wait()}")
            match = URL_LINE.search(line)
            if match:
                url = match.group(1)
        self.url = url
        self.port = int(url.rsplit(":", 1)[1])
        self._wait_http(deadline)
        return url

    def _wait_http(self, deadline: float) -> None:
        delay = 0.01
        while True:
            try:
                with urllib.request.urlopen(self.url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"noida-db at {self.url} does not answer")
            time.sleep(delay)  # polling a server that is starting: nothing to wait on
            delay = min(delay * 2, 0.2)

    def _signal(self, sig: signal.Signals, timeout: float) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._pump is not None:
            self._pump.join(5)  # reads to EOF now that the process is gone
        if proc.stdout is not None:
            proc.stdout.close()
        self._proc = None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server gracefully (data is kept for a later ``start()``)."""
        self._signal(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """``kill -9`` the server (it may lose its last second of writes)."""
        self._signal(signal.SIGKILL, 10.0)

    def close(self) -> None:
        """Stop the server and remove its data directory if we created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalSearch:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
