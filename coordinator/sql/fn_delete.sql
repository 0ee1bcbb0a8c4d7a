-- pathkeeper_delete: a delete's whole rule in one call, so a lone delete is one
-- statement (coordinator/single_statement.py): lock the node (pathkeeper_lock), refuse
-- the root (PK003) and a stale version (pathkeeper_check_version), refuse a directory
-- that is not empty unless recursive (PK005), delete the node with its subtree.
-- Two races end the statement with 40001 (serialization failure), which callers run
-- again on a fresh snapshot, as they do a deadlock: the subtree is read in the delete's
-- snapshot and a row a transaction we waited for changed is re-checked by id only, so a
-- node moved out of the subtree meanwhile would be deleted with it (its new parent, not
-- in the subtree, gives it away); and a create deeper in the subtree that committed
-- while we deleted is the foreign key's violation, which the caller turns into a re-run
-- too. ROWS 1: see fn_rename.sql.
CREATE OR REPLACE FUNCTION pathkeeper_delete(
    p_ns text, p_ref text, p_parts text[], p_id uuid, p_recursive boolean,
    p_if_version bigint
) RETURNS TABLE (
    id uuid, parent_id uuid, name text, kind varchar, version bigint, content text,
    metadata jsonb, created_at timestamptz, updated_at timestamptz,
    path text, count integer
) LANGUAGE plpgsql ROWS 1 AS $fn$
DECLARE
    target record;
    r nodes%ROWTYPE;
    gone uuid[];
    parents uuid[];
BEGIN
    target := pathkeeper_lock(p_ns, p_ref, p_parts, p_id, true);
    r := target.node;
    path := target.path;
    IF r.parent_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PK003',
            MESSAGE = 'cannot delete the root (drop the namespace instead)';
    END IF;
    PERFORM pathkeeper_check_version(r.version, p_if_version);
    -- The lock waited for any create in flight directly inside.
    IF r.kind = 'dir' AND NOT p_recursive
       AND EXISTS (SELECT FROM nodes x WHERE x.namespace = p_ns AND x.parent_id = r.id) THEN
        RAISE EXCEPTION USING ERRCODE = 'PK005', MESSAGE = format('%s is not empty', path);
    END IF;
    -- The walk and the delete name the namespace by the rows' own column, never by
    -- p_ns: see coordinator/subtree.py.
    WITH RECURSIVE sub(namespace, id) AS (
        SELECT r.namespace, r.id
      UNION ALL
        SELECT x.namespace, x.id
        FROM sub s JOIN nodes x ON x.namespace = s.namespace AND x.parent_id = s.id
    ), del AS (
        DELETE FROM nodes x WHERE (x.namespace, x.id) IN (SELECT s.namespace, s.id FROM sub s)
        RETURNING x.id, x.parent_id
    )
    SELECT array_agg(del.id), array_agg(del.parent_id) INTO gone, parents FROM del;
    IF EXISTS (SELECT FROM unnest(gone, parents) AS g(gid, gparent)
               WHERE g.gid <> r.id AND NOT g.gparent = ANY (gone)) THEN
        RAISE EXCEPTION USING ERRCODE = '40001',
            MESSAGE = 'a node moved out of the subtree while it was being deleted';
    END IF;
    id := r.id; parent_id := r.parent_id; name := r.name; kind := r.kind;
    version := r.version; content := r.content; metadata := r.metadata;
    created_at := r.created_at; updated_at := r.updated_at;
    count := coalesce(array_length(gone, 1), 0);
    RETURN NEXT;
END
$fn$;
