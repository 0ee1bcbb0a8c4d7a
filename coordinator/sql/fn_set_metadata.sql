-- pathkeeper_set_metadata: a file's or a directory's metadata in one call, so a lone
-- set is one statement (coordinator/single_statement.py). Locked FOR NO KEY UPDATE
-- (pathkeeper_lock): creates under a directory whose metadata is being set go on.
-- Refuses the root (PK007) and a stale version (pathkeeper_check_version). The
-- metadata's own checks are Python's, before the call. ROWS 1: see fn_rename.sql.
CREATE OR REPLACE FUNCTION pathkeeper_set_metadata(
    p_ns text, p_ref text, p_parts text[], p_id uuid, p_metadata jsonb, p_if_version bigint
) RETURNS TABLE (
    id uuid, parent_id uuid, name text, kind varchar, version bigint, content text,
    metadata jsonb, created_at timestamptz, updated_at timestamptz, path text
) LANGUAGE plpgsql ROWS 1 AS $fn$
DECLARE
    target record;
    r nodes%ROWTYPE;
BEGIN
    target := pathkeeper_lock(p_ns, p_ref, p_parts, p_id, false);
    r := target.node;
    path := target.path;
    IF r.parent_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PK007', MESSAGE = 'the root has no metadata';
    END IF;
    PERFORM pathkeeper_check_version(r.version, p_if_version);
    -- (namespace, id) also as a row comparison: see pathkeeper_lock.
    UPDATE nodes x SET metadata = p_metadata, version = x.version + 1, updated_at = now()
    WHERE x.namespace = p_ns AND x.id = r.id AND (x.namespace, x.id) >= (p_ns, r.id)
    RETURNING x.* INTO r;
    id := r.id; parent_id := r.parent_id; name := r.name; kind := r.kind;
    version := r.version; content := r.content; metadata := r.metadata;
    created_at := r.created_at; updated_at := r.updated_at;
    RETURN NEXT;
END
$fn$;
