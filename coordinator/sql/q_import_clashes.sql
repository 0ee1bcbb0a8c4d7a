-- Staged paths that exist already (an implied directory may meet an existing one):
-- the first :limit, and how many in all.
SELECT s.line, s.path, s.implied, count(*) OVER () AS total
FROM pk_import_stage s JOIN pk_import_existing e ON e.path = s.path
WHERE NOT s.implied OR e.kind <> 'dir'
ORDER BY s.line LIMIT :limit
