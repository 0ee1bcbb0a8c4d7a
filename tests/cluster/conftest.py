"""The cluster tests reuse the indexer tests' helpers (the index-equals-PostgreSQL check,
fast bulk test data): their folder is a folder of test modules, not a package, so it
goes on the import path as pytest puts it there for its own modules."""

from __future__ import annotations

import sys
from pathlib import Path

_INDEXER_TESTS = str(Path(__file__).resolve().parents[1] / "indexer")
if _INDEXER_TESTS not in sys.path:
    sys.path.insert(0, _INDEXER_TESTS)
