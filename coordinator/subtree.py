"""The walk down a subtree of ``nodes`` that yields each node with its path.

Paths are computed, never stored (an adjacency list: a rename is one row), so
every reader that needs paths for a whole subtree walks down from its top in one
recursive query, joining each child's name to its parent's path: the tree's
``walk``, the worker's subtree rewrites (``indexer.snapshot``), reindex's snapshot
read and verify's comparison table. The walk lives here, beside the table it
reads, so the indexer builds on it instead of writing its own; the callers choose
the columns, where the walk starts and what else each row carries.
"""

from __future__ import annotations

from collections.abc import Sequence

#: A child's path from its parent's (``s``) and its own name (``n``); the root is ``/``.
CHILD_PATH = "CASE WHEN s.path = '/' THEN '/' || n.name ELSE s.path || '/' || n.name END"


def subtree_cte(
    columns: Sequence[str],
    start: str,
    *,
    top_path: str = "CAST(:path AS text)",
    namespace: str = ":ns",
    carry: Sequence[tuple[str, str, str]] = (),
    join: str = "",
    before: str = "",
) -> str:
    """``WITH RECURSIVE ... sub AS (...)``: the rows of ``nodes`` matching ``start``
    (a WHERE condition) and every node below them, each with ``columns`` and ``path``
    (``top_path`` for the starting rows). The caller appends its ``SELECT ... FROM sub``.

    ``namespace``: the children's namespace (``:ns``, or ``s.namespace`` when the walk
    starts in several namespaces and ``columns`` holds ``namespace``). ``carry``: more
    columns as ``(name, value at the top, value from parent s and child n)``, with
    ``join`` for what those need (joined to ``n``) and ``before`` for other CTEs."""
    top = ", ".join([*columns, f"{top_path} AS path", *(f"{v} AS {c}" for c, v, _ in carry)])
    step = ", ".join([*(f"n.{c}" for c in columns), CHILD_PATH, *(s for _, _, s in carry)])
    ctes = f"{before}, " if before else ""
    return f"""
    WITH RECURSIVE {ctes}sub AS (
        SELECT {top} FROM nodes WHERE {start}
      UNION ALL
        SELECT {step}
          FROM sub s JOIN nodes n ON n.namespace = {namespace} AND n.parent_id = s.id {join}
    )
    """
