"""The set fold's SQL (``indexer.setfold``) against the events it reads
(``coordinator.events``), compared as text."""

from __future__ import annotations

import re

from coordinator.events import EVENT_TYPES, payload_keys
from indexer import setfold


def test_the_set_fold_reads_only_payload_keys_that_events_define() -> None:
    """The set fold reads payloads in SQL; a key renamed in ``coordinator.events`` must
    not leave it reading a key nobody writes."""
    sql = setfold.AGG_SQL + setfold.STATE_SQL
    read = set(re.findall(r"payload\s*->>?\s*'(\w+)'", sql))
    assert read and read <= {k for cls in EVENT_TYPES.values() for k in payload_keys(cls)}
    assert {v for k, v in setfold.EVENT_PARAMS.items() if k.startswith("t_")} == set(EVENT_TYPES)
