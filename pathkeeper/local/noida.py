"""noida-db, a fast Elasticsearch-compatible stand-in, as a throwaway local server.

Runs the binary bundled in the ``noida-db`` package with only its Elasticsearch
service, on a free port and a fresh data directory, and reads the URL from its
log line ``elasticsearch  http://127.0.0.1:PORT``.

Where it differs from Elasticsearch (the code follows Elasticsearch's documented
behaviour; README.md lists each difference with the test that guards it): it
forgets delete tombstones at once (no ``index.gc_deletes``), accepts bulk
``update`` with an external version, accepts unknown mapping parameters and
analysers of modules a node may lack, implements a Painless subset without
``throw``, answers ``refresh=wait_for`` at once, loses about the last second of
writes on ``kill -9``, and its search cost grows with index size.
"""

from __future__ import annotations

import os
import re
from importlib.resources import files
from pathlib import Path
from typing import Any

from pathkeeper.local.server import LocalServer, LocalServerError

URL_LINE = re.compile(r"elasticsearch\s+(http://\S+)")


def noida_binary() -> Path:
    """The path of the noida-db binary bundled in the Python package."""
    try:
        path = Path(str(files("noida_db").joinpath("noida-db")))
    except ModuleNotFoundError as exc:
        raise LocalServerError("noida-db is not installed (pip install noida-db)") from exc
    if not path.is_file():
        raise LocalServerError(f"noida-db binary not found at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


class LocalNoida(LocalServer):
    """A running noida-db server (see ``LocalServer``)."""

    label = "noida-db"

    def command(self) -> tuple[list[str], dict[str, str], dict[str, Any]]:
        cmd = [
            str(noida_binary()), "start", "--only", "elasticsearch",
            "--elasticsearch-port", str(self.port), "--data-dir", str(self.data_dir / "data"),
        ]
        return cmd, dict(os.environ), {}

    def url_from_line(self, line: str) -> str | None:
        match = URL_LINE.search(line)
        return match.group(1) if match else None
