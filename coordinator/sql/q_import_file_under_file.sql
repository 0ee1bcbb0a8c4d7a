-- Lines whose parent is a file of the same import: the first :limit, and how many in all.
-- The distinct parents are found first and looked up once each (in the unique index on
-- path); the lines under a file are then only searched for when there is such a file.
WITH files AS MATERIALIZED (
    SELECT p.path, p.line
    FROM (SELECT DISTINCT parent_path FROM pk_import_stage WHERE depth > 1) d
    JOIN pk_import_stage p ON p.path = d.parent_path
    WHERE p.kind = 'file'
)
SELECT s.line, f.path, f.line AS parent_line, count(*) OVER () AS total
FROM files f JOIN pk_import_stage s ON s.parent_path = f.path
ORDER BY s.line LIMIT :limit
