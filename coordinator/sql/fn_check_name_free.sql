-- pathkeeper_check_name_free: refuse a name already taken in a directory, with the
-- path it would have had (p_path). The unique constraint uq_nodes_namespace_parent_name
-- would refuse it too, but its message names no path; it stays the guard against a
-- sibling committed after this check (callers word that one from the path they know).
CREATE OR REPLACE FUNCTION pathkeeper_check_name_free(
    p_ns text, p_parent uuid, p_name text, p_path text
) RETURNS void LANGUAGE plpgsql STABLE AS $fn$
BEGIN
    IF EXISTS (SELECT FROM nodes x WHERE x.namespace = p_ns
               AND x.parent_id = p_parent AND x.name = p_name) THEN
        RAISE EXCEPTION USING ERRCODE = 'unique_violation',
            MESSAGE = format('%s already exists', p_path);
    END IF;
END
$fn$;
