-- pathkeeper_rename: a rename's whole rule in one call, so a lone rename is one
-- statement (coordinator/single_statement.py): lock the node (pathkeeper_lock), refuse
-- the root (PK003) and a stale version (pathkeeper_check_version), refuse a taken name
-- (pathkeeper_check_name_free), update the row. The caller writes the event. ROWS 1: a
-- set-returning function is estimated at 1,000 rows unless declared, and with that
-- estimate the lone statement's generic plan looks dearer than a custom one, so it was
-- planned again on every execution (about a fifth of a rename's server CPU).
CREATE OR REPLACE FUNCTION pathkeeper_rename(
    p_ns text, p_ref text, p_parts text[], p_id uuid, p_name text, p_if_version bigint
) RETURNS TABLE (
    id uuid, parent_id uuid, name text, kind varchar, version bigint, content text,
    metadata jsonb, created_at timestamptz, updated_at timestamptz,
    old_name text, old_path text, path text, changed boolean
) LANGUAGE plpgsql ROWS 1 AS $fn$
DECLARE
    target record;
    r nodes%ROWTYPE;
BEGIN
    target := pathkeeper_lock(p_ns, p_ref, p_parts, p_id, true);
    r := target.node;
    old_path := target.path;
    IF r.parent_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PK003', MESSAGE = 'cannot rename the root';
    END IF;
    PERFORM pathkeeper_check_version(r.version, p_if_version);
    path := substr(old_path, 1, length(old_path) - length(r.name)) || p_name;
    old_name := r.name;
    changed := p_name <> r.name;
    IF changed THEN
        PERFORM pathkeeper_check_name_free(p_ns, r.parent_id, p_name, path);
        -- (namespace, id) also as a row comparison: see pathkeeper_lock.
        UPDATE nodes x SET name = p_name, version = x.version + 1, updated_at = now()
        WHERE x.namespace = p_ns AND x.id = r.id AND (x.namespace, x.id) >= (p_ns, r.id)
        RETURNING x.* INTO r;
    END IF;
    id := r.id; parent_id := r.parent_id; name := r.name; kind := r.kind;
    version := r.version; content := r.content; metadata := r.metadata;
    created_at := r.created_at; updated_at := r.updated_at;
    RETURN NEXT;
END
$fn$;
