"""The indexer worker as a real child process (``python -m pathkeeper indexer run``):
what the tests and benchmarks start, ``kill -9`` and read the JSON log lines of."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pathkeeper

#: Where ``python -m pathkeeper`` finds this very package: the checkout it runs from
#: (or the site-packages it is installed in).
PACKAGE_ROOT = Path(pathkeeper.__file__).resolve().parents[1]


class WorkerProcess:
    """``python -m pathkeeper indexer run ...`` as a real child process (``kill -9``-able)."""

    def __init__(
        self, database_url: str, es_url: str, alias: str, log_path: Path, *args: str,
        own_session: bool = False,
    ) -> None:
        #: ``own_session``: start it in a session of its own, as a service manager would.
        #: With the kernel's autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``)
        #: CPU is shared fairly between sessions, so a worker left in the session of a
        #: benchmark's client threads competes with them for that session's share.
        self.own_session = own_session
        self.cmd = [
            sys.executable, "-m", "pathkeeper", "indexer", "run", "--database-url", database_url,
            "--es-url", es_url, "--alias", alias, "--poll-interval", "0.2", *args,
        ]
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                self.cmd, stdout=log, stderr=log, cwd=PACKAGE_ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=self.own_session,
            )
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def terminate(self, timeout: float = 30) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def log_lines(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not self.log_path.exists():
            return out
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def started_lines(self) -> list[dict[str, Any]]:
        return [line for line in self.log_lines() if line.get("event") == "worker_started"]

    def ensure_dead(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
