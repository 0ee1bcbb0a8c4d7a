-- The missing parents of the staged paths, each once, with the first line that needs
-- it (for error messages). A parent of '/x/y' is found by cutting its last name.
INSERT INTO pk_import_stage (line, path, parent_path, name, kind, content, metadata,
                             depth, implied, seq)
WITH RECURSIVE missing(path, line) AS (
    SELECT s.parent_path, min(s.line)
    FROM pk_import_stage s
    WHERE s.depth > 1
      AND NOT EXISTS (SELECT FROM pk_import_stage t WHERE t.path = s.parent_path)
    GROUP BY s.parent_path
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
