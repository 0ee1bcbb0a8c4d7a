-- A stat by path, in one statement so in one snapshot: the walk from the root (for
-- the error that says where it breaks off) and the row at its end, if it reaches it.
-- Parameters ns, parts (the path's names) and n (how many).
SELECT r.ids AS chain_ids, r.kinds AS chain_kinds,
       n.id, n.parent_id, n.name, n.kind, n.version, n.content, n.metadata,
       n.created_at, n.updated_at
FROM pathkeeper_resolve(:ns, CAST(:parts AS text[])) AS r
LEFT JOIN nodes n ON n.namespace = :ns AND n.id = r.ids[:n + 1]
