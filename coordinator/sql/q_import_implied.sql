-- The missing parents of the staged paths, each once, with the first line that needs
-- it (for error messages). A parent of '/x/y' is found by cutting its last name. The
-- staged rows are grouped by parent first: a tree has far fewer directories than
-- nodes, so each distinct parent is looked up once, in the unique index on path.
INSERT INTO pk_import_stage (line, path, parent_path, name, kind, content, metadata,
                             depth, implied, seq)
WITH RECURSIVE parents AS MATERIALIZED (
    SELECT parent_path AS path, min(line) AS line
    FROM pk_import_stage WHERE depth > 1
    GROUP BY parent_path
), missing(path, line) AS (
    SELECT g.path, g.line
    FROM parents g
    WHERE NOT EXISTS (SELECT FROM pk_import_stage t WHERE t.path = g.path)
  UNION
    SELECT p.parent, m.line
    FROM missing m,
         LATERAL (SELECT substring(m.path FROM '^(.*)/[^/]*$') AS parent) AS p
    WHERE p.parent <> ''
      AND NOT EXISTS (SELECT FROM pk_import_stage t WHERE t.path = p.parent)
)
SELECT min(line), path,
       coalesce(nullif(substring(path FROM '^(.*)/[^/]*$'), ''), '/'),
       substring(path FROM '[^/]*$'), 'dir', NULL, '{}',
       array_length(string_to_array(path, '/'), 1) - 1, true,
       (SELECT max(line) FROM pk_import_stage) + row_number() OVER ()
FROM missing GROUP BY path
