-- pathkeeper_merge_metadata: a node's metadata updated key by key in one call, so a lone
-- merge is one statement (coordinator/single_statement.py): each key of p_patch replaces
-- the node's, a key whose value is JSON null is removed, the other keys stay (top level
-- only: a nested object is replaced whole). Locks the node (pathkeeper_lock, FOR NO KEY
-- UPDATE like a metadata write), merges the metadata the locked row holds, and writes the
-- result through pathkeeper_set_metadata by that row's id (the row it locked, whatever a
-- concurrent rename of an ancestor did to the path since): the root's refusal (PK007),
-- the version check and the write are set_metadata's, not written again here. The
-- patch's own checks are Python's, before the call. ROWS 1: see fn_rename.sql.
CREATE OR REPLACE FUNCTION pathkeeper_merge_metadata(
    p_ns text, p_ref text, p_parts text[], p_id uuid, p_patch jsonb, p_if_version bigint
) RETURNS TABLE (
    id uuid, parent_id uuid, name text, kind varchar, version bigint, content text,
    metadata jsonb, created_at timestamptz, updated_at timestamptz, path text
) LANGUAGE plpgsql ROWS 1 AS $fn$
DECLARE
    target record;
BEGIN
    target := pathkeeper_lock(p_ns, p_ref, p_parts, p_id, false);
    RETURN QUERY SELECT * FROM pathkeeper_set_metadata(
        p_ns, CAST((target.node).id AS text), NULL, (target.node).id,
        (coalesce((target.node).metadata, '{}'::jsonb) || p_patch) - ARRAY(
            SELECT e.key FROM jsonb_each(p_patch) AS e WHERE e.value = 'null'::jsonb),
        p_if_version);
END
$fn$;
