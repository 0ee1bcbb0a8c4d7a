-- A stat by node id, in one statement so in one snapshot: the row and the names of
-- its ancestors, root first (the path). Parameters ns and id. The depth guard makes
-- a (constraint-violating) cycle end the query.
-- Every read names (namespace, id) also as a row comparison and each step up is a
-- probe (LATERAL ... LIMIT 1), as in pathkeeper_lock: with statistics from before a
-- namespace filled, the planner scanned the namespace at each level by
-- (namespace, parent_id, name), filtering on the id (19 ms for a stat in a namespace
-- of 20,000 nodes, against 0.35 ms).
WITH RECURSIVE up(id, parent_id, name, depth) AS (
    SELECT id, parent_id, name, 0 FROM nodes
    WHERE namespace = :ns AND id = :id AND (namespace, id) >= (:ns, :id)
  UNION ALL
    SELECT p.id, p.parent_id, p.name, u.depth + 1
    FROM up u CROSS JOIN LATERAL (
        SELECT n.id, n.parent_id, n.name FROM nodes n
        WHERE n.namespace = :ns AND n.id = u.parent_id
          AND (n.namespace, n.id) >= (:ns, u.parent_id)
        LIMIT 1
    ) AS p
    WHERE u.depth < 100000
)
SELECT id, parent_id, name, kind, version, content, metadata, created_at, updated_at,
       ARRAY(SELECT name FROM up ORDER BY depth DESC) AS names
FROM nodes WHERE namespace = :ns AND id = :id AND (namespace, id) >= (:ns, :id)
