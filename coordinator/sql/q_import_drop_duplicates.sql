-- After the duplicates are reported: keep each path's first line only, so the later
-- checks of the same refusal see each path once.
DELETE FROM pk_import_stage
WHERE line NOT IN (SELECT min(line) FROM pk_import_stage GROUP BY path)
