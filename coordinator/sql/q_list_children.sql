-- A directory's children in byte order of their names, a page at a time. Parameters
-- ns, id (the directory), after (the last name of the previous page, or NULL) and
-- limit (NULL for all).
SELECT id, parent_id, name, kind, version, content, metadata, created_at, updated_at
FROM nodes
WHERE namespace = :ns AND parent_id = :id
  AND (CAST(:after AS text) IS NULL OR name COLLATE "C" > :after)
ORDER BY name COLLATE "C"
LIMIT :limit
