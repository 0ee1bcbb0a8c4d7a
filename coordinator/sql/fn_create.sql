-- pathkeeper_create: a create's whole rule in one call, so a lone create is one
-- statement (coordinator/single_statement.py): the parent directory
-- (pathkeeper_walk_path, in the statement's snapshot), a free name
-- (pathkeeper_check_name_free: "/d/f already exists"), the insert. A sibling committed
-- after that check is the unique constraint's violation and a parent deleted since the
-- walk the foreign key's; the caller words both from the path it knows. The insert is a
-- statement of the function: its foreign-key check (which waits if a concurrent
-- transaction holds the parent row) ends before the function returns, so the caller's
-- claim of event positions still comes after every lock wait (the rule of
-- coordinator/eventlog.py). First the fence (pathkeeper_check_placed), before the walk.
-- ROWS 1: see fn_rename.sql.
CREATE OR REPLACE FUNCTION pathkeeper_create(
    p_ns text, p_parent text[], p_id uuid, p_name text, p_kind text, p_content text,
    p_metadata jsonb
) RETURNS TABLE (
    id uuid, parent_id uuid, name text, kind varchar, version bigint, content text,
    metadata jsonb, created_at timestamptz, updated_at timestamptz
) LANGUAGE plpgsql ROWS 1 AS $fn$
DECLARE
    dir uuid;
BEGIN
    PERFORM pathkeeper_check_placed(p_ns);
    dir := pathkeeper_walk_path(p_ns, p_parent, true);
    PERFORM pathkeeper_check_name_free(
        p_ns, dir, p_name, '/' || array_to_string(p_parent || p_name, '/'));
    RETURN QUERY
    INSERT INTO nodes AS x (namespace, id, parent_id, name, kind, content, metadata)
    VALUES (p_ns, p_id, dir, p_name, p_kind, p_content, p_metadata)
    RETURNING x.id, x.parent_id, x.name, x.kind, x.version, x.content, x.metadata,
              x.created_at, x.updated_at;
END
$fn$;
