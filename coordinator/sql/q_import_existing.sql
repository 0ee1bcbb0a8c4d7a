-- The staged paths that exist already, walking down from the root only where the
-- namespace has a directory of that name. Each step names the namespace by the parent
-- row's column, never by :ns: see coordinator/subtree.py.
CREATE TEMP TABLE pk_import_existing ON COMMIT DROP AS
WITH RECURSIVE m(path, namespace, id, kind) AS (
    SELECT s.path, n.namespace, n.id, n.kind
    FROM pk_import_stage s
    JOIN nodes n ON n.namespace = :ns AND n.parent_id = :root AND n.name = s.name
    WHERE s.depth = 1
  UNION ALL
    SELECT s.path, n.namespace, n.id, n.kind
    FROM m
    JOIN pk_import_stage s ON s.parent_path = m.path
    JOIN nodes n ON n.namespace = m.namespace AND n.parent_id = m.id AND n.name = s.name
    WHERE m.kind = 'dir'
)
SELECT path COLLATE "C" AS path, id, kind FROM m
