"""Every walk of a tree stays linear in the rows it walks when the statistics saw its
namespace empty.

The trap (coordinator/subtree.py): with the test's namespace analyzed (its root alone)
beside one of 1,000 nodes, then filled, the planner estimates it at one row. A walk
whose step named the namespace by a constant was then planned to compare every node of
the namespace with every row of a level: for the 2,001 nodes below ``/top`` the
worker's subtree read handled 8,052,028 rows and a recursive delete 12,048,062; a walk
up from a destination scanned the namespace at each level. The count of rows the
executor handled (``tree_checks.rows_handled``) tells the plans apart on any machine;
the bounds leave room for any plan that touches each row a few times.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from tree_checks import freeze_statistics, plans_logged, rows_handled

from coordinator import Coordinator
from coordinator.tree import SUBTREE_WALK_SQL
from indexer import live_nodes
from pathkeeper.local.bulk_tree import bulk_subtree

#: Files in the one directory below ``/top``: past about 1,000 the planner's choice
#: turned quadratic.
FILES = 1_999
#: The subtree of ``/top``: itself, its directory and the files.
WALKED = FILES + 2
#: Rows the executor may handle per node walked (measured 12-20 after the fix).
PER_NODE = 50

_WALKS: dict[str, str] = {
    "the worker's subtree read": live_nodes._SUBTREE_ENTRIES.text,
    "the tree's walk": SUBTREE_WALK_SQL,
    # From the root: the namespace's walk of reindex and verify (the root one more node).
    "a namespace's walk": live_nodes.NAMESPACE_WALK + "SELECT * FROM sub",
    "a recursive delete":
        "SELECT count(*) FROM pathkeeper_delete(:ns, NULL, NULL, :id, true, NULL)",
}


@pytest.fixture
def top(coord: Coordinator, ns: str) -> uuid.UUID:
    """``/top`` with ``FILES`` files in ``/top/p0``, created after the statistics."""
    freeze_statistics(coord, beside=True)
    coord.mkdir(ns, "/top")
    bulk_subtree(coord, ns, "/top", "p0", dirs=1, files_per_dir=FILES)
    return uuid.UUID(coord.stat(ns, "/top").id)


@pytest.mark.parametrize("walk", sorted(_WALKS))
def test_a_walk_in_a_namespace_newer_than_the_statistics_stays_linear(
        coord: Coordinator, ns: str, top: uuid.UUID, walk: str) -> None:
    params: dict[str, Any] = {
        "ns": ns, "id": top, "path": "/top", "index": "nodes", "top_version": 1,
        "move_ids": [top], "move_pos": [1]}
    with coord.engine.connect() as conn:
        handled = rows_handled(conn, _WALKS[walk], params)
        conn.rollback()
    assert handled <= PER_NODE * WALKED, (walk, handled)


#: Directories below ``/top`` that an import adds a file to.
DIRS = 2_000


def test_an_import_into_existing_directories_of_a_new_namespace_stays_linear(
        coord: Coordinator, ns: str) -> None:
    """The import's walk down the existing directories of its paths
    (``q_import_existing.sql``) follows the same rule: 2,000 new files, one in each of
    2,000 directories that exist. Every statement of the import is counted: 52,210,136
    rows with the walk's step naming the namespace by a constant (the import took
    3.1-3.4 s), 143,186 now (0.18-0.24 s)."""
    freeze_statistics(coord, beside=True)
    _, made = bulk_subtree(coord, ns, "/", "top", dirs=DIRS, files_per_dir=4)
    lines = [json.dumps({"path": f"/top/d{d}/new", "kind": "file", "content": "x"})
             for d in range(DIRS)]
    with plans_logged(coord.shard_map.engine(coord.shard_map.shard_of(ns))) as log:
        result = coord.import_nodes(ns, lines)
    assert result.created == DIRS
    assert log.rows_handled() <= PER_NODE * (made + DIRS), log.rows_handled()


_INTO_D3 = "ARRAY['d1', 'd2', 'd3'], 'e2', NULL, 100"
_UP_WALKS: dict[str, str] = {
    "a move": f"SELECT count(*) FROM pathkeeper_move(:ns, NULL, NULL, :id, {_INTO_D3})",
    "a copy": f"SELECT count(*) FROM pathkeeper_copy(:ns, NULL, NULL, :id, {_INTO_D3}, 10)",
}


@pytest.mark.parametrize("walk", sorted(_UP_WALKS))
def test_a_walk_up_reads_the_ancestors_not_the_namespace(
        coord: Coordinator, ns: str, top: uuid.UUID, walk: str) -> None:
    """An empty directory moved or copied three levels down, beside ``/top``: the walk
    up from the destination (and the move's locks on its ancestors) probe one row per
    level: 66-99 rows handled. By ``p_ns`` they scanned the namespace at each level and
    at the walk's start: 38,184-60,283."""
    for path in ("/e", "/d1", "/d1/d2", "/d1/d2/d3"):
        coord.mkdir(ns, path)
    moved = uuid.UUID(coord.stat(ns, "/e").id)
    with coord.engine.connect() as conn:
        handled = rows_handled(conn, _UP_WALKS[walk], {"ns": ns, "id": moved})
        conn.rollback()
    assert handled <= 200, (walk, handled)
