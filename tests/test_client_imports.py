"""The HTTP client is light: importing ``pathkeeper.client`` (and the command, error
and result types it answers with) imports none of the server's libraries, so a service
that only calls the HTTP API does not load the database or search stack."""

from __future__ import annotations

import subprocess
import sys

SERVER_LIBRARIES = ("sqlalchemy", "psycopg", "alembic", "fastapi", "starlette", "uvicorn",
                    "elasticsearch", "opensearchpy", "apscheduler", "pydantic")

CHECK = f"""
import sys
from pathkeeper.client import Client
from coordinator import Conflict, MutationResult, Node, Rename
loaded = sorted(m for m in {SERVER_LIBRARIES!r} if m in sys.modules)
print(",".join(loaded) or "none")
from coordinator import Coordinator  # still there, on first use
print(Coordinator.__module__, "sqlalchemy" in sys.modules)
"""


def test_importing_the_client_loads_no_server_library() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split("\n")
    assert out[0] == "none", f"pathkeeper.client imported {out[0]}"
    assert out[1] == "coordinator.api True"
