-- pathkeeper_subtree_extent: the size of node p_id's subtree, walked only as far as
-- its bounds: at most p_levels + 1 levels below the node and p_rows rows (NULL: no
-- row bound), so the cost is what fits under a limit, plus one. Answers the nodes
-- walked (the node itself included) and the deepest level reached below it (0 for a
-- file or an empty directory). A caller compares them with its limits:
-- pathkeeper_check_depth for the depth. The start names (namespace, id) also as a
-- row comparison and each step the namespace by the parent row's column, never by
-- p_ns: see coordinator/subtree.py.
CREATE OR REPLACE FUNCTION pathkeeper_subtree_extent(
    p_ns text, p_id uuid, p_levels integer, p_rows integer
) RETURNS TABLE (walked bigint, height integer) LANGUAGE sql STABLE AS $fn$
    WITH RECURSIVE sub(namespace, id, kind, depth) AS (
        SELECT x.namespace, x.id, x.kind, 0 FROM nodes x
        WHERE x.namespace = p_ns AND x.id = p_id AND (x.namespace, x.id) >= (p_ns, p_id)
      UNION ALL
        SELECT x.namespace, x.id, x.kind, s.depth + 1
        FROM sub s JOIN nodes x ON x.namespace = s.namespace AND x.parent_id = s.id
        WHERE s.kind = 'dir' AND s.depth <= p_levels
    )
    SELECT count(*), max(b.depth) FROM (SELECT s.depth FROM sub s LIMIT p_rows) AS b
$fn$;
