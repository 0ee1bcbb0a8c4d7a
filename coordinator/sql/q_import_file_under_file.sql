-- Lines whose parent is a file of the same import: the first :limit, and how many in all.
SELECT s.line, p.path, p.line AS parent_line, count(*) OVER () AS total
FROM pk_import_stage s JOIN pk_import_stage p ON p.path = s.parent_path
WHERE p.kind = 'file'
ORDER BY s.line LIMIT :limit
