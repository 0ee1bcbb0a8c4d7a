"""The walk down a subtree of ``nodes`` that yields each node with its path.

Paths are computed, never stored (an adjacency list: a rename is one row), so
every reader that needs paths for a whole subtree walks down from its top in one
recursive query, joining each child's name to its parent's path: the tree's
``walk``, the worker's subtree rewrites (``indexer.live_nodes``), reindex's snapshot
read and verify's comparison table. The walk lives here, beside the table it
reads, so the indexer builds on it instead of writing its own; the callers choose
the columns, where the walk starts and what else each row carries.

Each step finds the children by the namespace its parent row carries
(``n.namespace = s.namespace``), never by a constant. Compared with a constant, the
planner estimates a namespace from the statistics' most common values, and one the
last ANALYZE saw empty or not at all comes out at one row: it then scanned the whole
namespace once per level and compared every node with every parent of that level (the
worker's read of a 10,001-node subtree: 9.8 s of execution, against 0.14 s). Joined to
the parent's column, the estimate is the table's rows over its number of namespaces
(migration 0018), whatever the statistics' age, and each parent is one probe of the
(namespace, parent_id, name) index. The server-side walks (``fn_delete.sql``,
``fn_copy.sql``, ``fn_subtree_extent.sql``, the walk up of ``fn_move.sql``) and the
import's (``q_import_existing.sql``) follow the same rule; ``tests/test_subtree_walks.py``
counts their rows.
"""

from __future__ import annotations

from collections.abc import Sequence

#: The start of a walk from one node, ``:id`` of ``:ns``. (namespace, id) also as a row
#: comparison, an index condition only of an index that starts with both: with
#: statistics that saw the namespace empty, the planner otherwise read the start through
#: (namespace, parent_id, name), the whole namespace filtered on the id (see
#: pathkeeper_lock).
FROM_NODE = "namespace = :ns AND id = :id AND (namespace, id) >= (:ns, :id)"

#: A child's path from its parent's (``s``) and its own name (``n``); the root is ``/``.
CHILD_PATH = "CASE WHEN s.path = '/' THEN '/' || n.name ELSE s.path || '/' || n.name END"


def subtree_cte(
    columns: Sequence[str],
    start: str,
    *,
    top_path: str = "CAST(:path AS text)",
    carry: Sequence[tuple[str, str, str]] = (),
    join: str = "",
    before: str = "",
) -> str:
    """``WITH RECURSIVE ... sub AS (...)``: the rows of ``nodes`` matching ``start``
    (a WHERE condition, in one namespace or several) and every node below them, each
    with ``columns``, ``namespace`` (added when ``columns`` lacks it) and ``path``
    (``top_path`` for the starting rows). The caller appends its ``SELECT ... FROM sub``.

    ``carry``: more columns as ``(name, value at the top, value from parent s and child
    n)``, with ``join`` for what those need (joined to ``n``) and ``before`` for other
    CTEs."""
    walked = [*columns] if "namespace" in columns else ["namespace", *columns]
    top = ", ".join([*walked, f"{top_path} AS path", *(f"{v} AS {c}" for c, v, _ in carry)])
    step = ", ".join([*(f"n.{c}" for c in walked), CHILD_PATH, *(s for _, _, s in carry)])
    ctes = f"{before}, " if before else ""
    return f"""
    WITH RECURSIVE {ctes}sub AS (
        SELECT {top} FROM nodes WHERE {start}
      UNION ALL
        SELECT {step}
          FROM sub s JOIN nodes n ON n.namespace = s.namespace AND n.parent_id = s.id {join}
    )
    """
