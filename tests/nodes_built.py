"""Counting the ``Node`` objects a module builds from rows: a path that streams documents
as PostgreSQL rendered them builds none per document."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from coordinator import Node


def count_nodes_built(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> list[str]:
    """The paths of the ``Node`` objects ``module`` builds through its ``node_of`` from now
    on (until ``monkeypatch`` is undone), appended as they are built."""
    built: list[str] = []
    real = module.node_of

    def counted(ns: str, row: Any, path: str, with_content: bool = True) -> Node:
        built.append(path)
        return real(ns, row, path, with_content)  # type: ignore[no-any-return]

    monkeypatch.setattr(module, "node_of", counted)
    return built
