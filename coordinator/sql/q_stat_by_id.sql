-- A stat by node id, in one statement so in one snapshot: the row and the names of
-- its ancestors, root first (the path). Parameters ns and id. The depth guard makes
-- a (constraint-violating) cycle end the query.
WITH RECURSIVE up(id, parent_id, name, depth) AS (
    SELECT id, parent_id, name, 0 FROM nodes WHERE namespace = :ns AND id = :id
  UNION ALL
    SELECT n.id, n.parent_id, n.name, u.depth + 1
    FROM up u JOIN nodes n ON n.namespace = :ns AND n.id = u.parent_id
    WHERE u.depth < 100000
)
SELECT id, parent_id, name, kind, version, content, metadata, created_at, updated_at,
       ARRAY(SELECT name FROM up ORDER BY depth DESC) AS names
FROM nodes WHERE namespace = :ns AND id = :id
