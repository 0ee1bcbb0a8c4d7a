"""Helpers shared by the HTTP tests (imported by name: tests/http is on sys.path)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI

from pathkeeper.local.ports import free_port


@dataclass(frozen=True)
class Keys:
    """Secrets of keys for namespaces "a" and "b" (both created, empty)."""

    admin: str  # admin of every namespace
    a_write: str
    a_read: str
    b_write: str

    @staticmethod
    def h(secret: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret}"}


def ok(resp: Any, status: int = 200) -> dict[str, Any]:
    """The JSON body, after checking the status."""
    assert resp.status_code == status, resp.text[:800]
    body: dict[str, Any] = resp.json()
    return body


def err(resp: Any, status: int, code: str) -> dict[str, Any]:
    """The error body, after checking the status, the shape and the code."""
    assert resp.status_code == status, resp.text[:800]
    body: dict[str, Any] = resp.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body


class LiveServer:
    """A real uvicorn server in a thread of this process, on 127.0.0.1."""

    def __init__(self, app: FastAPI) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                           access_log=False)
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:  # uvicorn offers no event to wait on
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
