"""A throwaway search server in a child process: the part the real Elasticsearch node
and the noida-db stand-in share (start, stop, kill -9, restart on the same port and data).

The child runs in a session of its own, so a Ctrl-C in the terminal is ours to
forward, and stopping it signals its whole process group: Elasticsearch's launcher
starts the server JVM as a child of its own, and both must go.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Any


class LocalServerError(RuntimeError):
    """The local search server could not be obtained or did not start."""


class LocalServer:
    """A running local search server; ``.url`` is its HTTP address.

    Use as a context manager, or call ``start()`` and ``stop()``. After ``stop()``
    or ``kill()``, ``start()`` brings it back on the same port and data directory
    (how tests simulate an outage).
    """

    #: What the server is, for messages.
    label = "search server"
    #: The path polled until it answers 200.
    health_path = "/"

    def __init__(
        self, data_dir: str | Path | None = None, port: int = 0, startup_timeout: float = 30.0
    ) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="pathkeeper-search-"))
        self.port = port
        self.startup_timeout = startup_timeout
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._pump: threading.Thread | None = None
        self._tail: deque[str] = deque(maxlen=40)

    # --- what a concrete server provides

    def command(self) -> tuple[list[str], dict[str, str], dict[str, Any]]:
        """The command line, its environment and extra ``Popen`` arguments."""
        raise NotImplementedError

    def url_from_line(self, line: str) -> str | None:
        """The server's URL if this output line announces it (None: keep reading)."""
        return None

    # --- life cycle

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def output_tail(self) -> str:
        """The last lines the server printed (for error messages)."""
        return "".join(self._tail)

    def start(self) -> str:
        """Start the server (on the previous port, if it ran before) and wait until it
        answers HTTP; returns its URL."""
        if self.running:
            return self.url
        cmd, env, extra = self.command()
        proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True, **extra,
        )
        self._proc = proc
        announced: list[str] = []

        def pump() -> None:
            # Keep draining the output for the server's whole life, or it blocks on a
            # full pipe; keep the tail for error messages.
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace")
                self._tail.append(line)
                if not announced:
                    url = self.url_from_line(line)
                    if url:
                        announced.append(url)

        self._pump = threading.Thread(target=pump, name=f"{self.label}-output", daemon=True)
        self._pump.start()
        deadline = time.monotonic() + self.startup_timeout
        delay = 0.02
        while True:
            if proc.poll() is not None:
                self._reap()
                raise LocalServerError(
                    f"{self.label} exited during start-up with code {proc.returncode}; "
                    f"its last output:\n{self.output_tail()}"
                )
            if not self.url and announced:
                self.url = announced[0]
                self.port = int(self.url.rsplit(":", 1)[1])
            if self.url and self._answers():
                return self.url
            if time.monotonic() > deadline:
                self.kill()
                raise LocalServerError(
                    f"{self.label} did not answer within {self.startup_timeout:.0f} s; "
                    f"its last output:\n{self.output_tail()}"
                )
            time.sleep(delay)  # polling a server that is starting: nothing to wait on
            delay = min(delay * 2, 0.25)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + self.health_path, timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False

    def _signal(self, sig: signal.Signals, timeout: float) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None or sig == signal.SIGKILL:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        # Children of the launcher may outlive it by a moment: the group must be gone
        # before the port and data directory are reused.
        self._wait_group_gone(proc.pid, timeout)
        self._reap()

    def _wait_group_gone(self, pgid: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            except PermissionError:
                pass  # still there, owned by the unprivileged user we started it as
            if time.monotonic() > deadline:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    return
                deadline = time.monotonic() + timeout
            time.sleep(0.05)  # a dying JVM: nothing to wait on but its exit

    def _reap(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if self._pump is not None:
            self._pump.join(5)  # reads to EOF now that the process is gone
        if proc.stdout is not None:
            proc.stdout.close()
        self._proc = None

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server gracefully (data is kept for a later ``start()``)."""
        self._signal(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """``kill -9`` the server's whole process group."""
        self._signal(signal.SIGKILL, 10.0)

    def close(self) -> None:
        """Stop the server and remove its data directory if we created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
