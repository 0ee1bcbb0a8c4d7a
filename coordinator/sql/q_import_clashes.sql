SELECT s.line, s.path, s.implied
FROM pk_import_stage s JOIN pk_import_existing e ON e.path = s.path
WHERE NOT s.implied OR e.kind <> 'dir'
ORDER BY s.line LIMIT :limit
