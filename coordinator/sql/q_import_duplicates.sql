SELECT path, array_agg(line ORDER BY line) AS lines
FROM pk_import_stage WHERE NOT implied
GROUP BY path HAVING count(*) > 1
ORDER BY min(line) LIMIT :limit
