-- Paths given on more than one line: the first :limit, each with its lines, and how many
-- in all (the window runs before the LIMIT), so a refusal says how many more there are.
SELECT path, array_agg(line ORDER BY line) AS lines, count(*) OVER () AS total
FROM pk_import_stage WHERE NOT implied
GROUP BY path HAVING count(*) > 1
ORDER BY min(line) LIMIT :limit
