-- pathkeeper_walk_path: the id of the node a path names, or the error that says why
-- there is none; the one place a path's errors are worded. With p_dir, the node must
-- be a directory (a parent, a destination). Errors (SQLSTATEs of coordinator/db.py):
--   PK001 no namespace 'ns'            the namespace has no root
--   PK002 /a/f is a file               a name below /a/f was asked for, or p_dir
--   PK001 /a/b does not exist          the first missing name, as a full path
-- STABLE, as pathkeeper_resolve: the walk is one view, the caller's statement's.
CREATE OR REPLACE FUNCTION pathkeeper_walk_path(p_ns text, p_parts text[], p_dir boolean)
RETURNS uuid LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    chain record;
    n integer := coalesce(array_length(p_parts, 1), 0);
    reached integer;
BEGIN
    SELECT * INTO chain FROM pathkeeper_resolve(p_ns, p_parts);
    IF chain.ids IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PK001', MESSAGE = format('no namespace %L', p_ns);
    END IF;
    reached := array_length(chain.ids, 1);
    IF reached <= n THEN
        IF chain.kinds[reached] <> 'dir' THEN
            RAISE EXCEPTION USING ERRCODE = 'PK002', MESSAGE = format('%s is a file',
                '/' || array_to_string(p_parts[1:reached - 1], '/'));
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'PK001', MESSAGE = format(
            '%s does not exist', '/' || array_to_string(p_parts[1:reached], '/'));
    END IF;
    IF p_dir AND chain.kinds[n + 1] <> 'dir' THEN
        RAISE EXCEPTION USING ERRCODE = 'PK002', MESSAGE = format('%s is a file',
            '/' || array_to_string(p_parts, '/'));
    END IF;
    RETURN chain.ids[n + 1];
END
$fn$;
